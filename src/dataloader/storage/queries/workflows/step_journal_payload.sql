-- The journal row's payload of a recorded workflow position (record_step.sql, record_step_job.sql
-- include it in their journal's SELECT list, on the CTE `rec` of the record they wrote): one shape
-- for every face that reads a run's journal, whichever attempt wrote the record. No parameters.
           jsonb_strip_nulls(jsonb_build_object('seq', rec.seq, 'name', rec.name, 'state', rec.state,
                                                'attempts', rec.attempts, 'error', rec.error,
                                                'wake_at', rec.wake_at, 'job_id', rec.job_id))
