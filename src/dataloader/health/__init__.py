"""The database's health as it affects the queue, read at scrape time: what an operator
alerts on that only the database knows (stuck and held jobs, observers waiting for capacity, live
nodes, connections, the xmin horizon, dead tuples). Every node reads the same numbers from the same
database, so any node's /metrics answers for the whole cluster; deploy/prometheus/ holds the rules."""
