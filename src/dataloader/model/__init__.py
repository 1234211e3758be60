"""The domain's values and their one vocabulary: jobs, chains, holds, filters, processes,
schedules, observers, ids and time. Nothing here does I/O; every other room imports from here.
"""
