"""Driver scripts for the peers; run with bench/.peers-venv/bin/python, never imported by the harness."""
