"""The job capability: enqueue and the job rules (JobManager), search, and the duties that keep
jobs moving (the reaper, the queue-time checker).
"""
