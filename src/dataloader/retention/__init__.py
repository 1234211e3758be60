"""Retention and stats: how long finished jobs are kept, the pruner that removes them, and the
throughput/error statistics with their rollup duty.
"""
