-- wrk script of the `http` measure (bench/measures.py): POST /api/v1/jobs/trigger, each request a
-- distinct lock_key (thread number + counter), the body the httpx client of the measure sends.
local threads = {}
local thread_id = 0
local counter = 0

function setup(thread)
   thread_id = thread_id + 1
   thread:set("thread_id", thread_id)
   table.insert(threads, thread)
end

function request()
   counter = counter + 1
   local body = '{"queue":"bench","task":"dl.noop","lock_key":"t' .. thread_id .. '-' .. counter ..
                '","args":{"i":' .. counter .. '}}'
   return wrk.format("POST", "/api/v1/jobs/trigger", {["Content-Type"] = "application/json"}, body)
end
