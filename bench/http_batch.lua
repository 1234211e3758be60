-- wrk script of the `http` measure's batch run (bench/measures.py): POST /api/v1/jobs/batch, each
-- request `batch` trigger bodies (BENCH_HTTP_BATCH, default 1000, the endpoint's maximum), each job
-- a distinct lock_key (thread number + counter), so the rate is requests/s × batch.
local thread_id = 0
local counter = 0
local batch = tonumber(os.getenv("BENCH_HTTP_BATCH") or "1000")

function setup(thread)
   thread_id = thread_id + 1
   thread:set("thread_id", thread_id)
end

function request()
   local items = {}
   for i = 1, batch do
      counter = counter + 1
      items[i] = '{"queue":"bench","task":"dl.noop","lock_key":"b' .. thread_id .. '-' .. counter ..
                 '","args":{"i":' .. counter .. '}}'
   end
   return wrk.format("POST", "/api/v1/jobs/batch", {["Content-Type"] = "application/json"},
                     '{"jobs":[' .. table.concat(items, ",") .. ']}')
end
