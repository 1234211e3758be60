-- Wake a run: count the wake and make its job due now if it waits in the queue (0030). $1 run id.
SELECT dl_workflow_wake($1)
