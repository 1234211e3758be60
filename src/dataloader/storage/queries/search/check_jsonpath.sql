-- Parse $1 as a jsonpath, so a bad path in a filter is a clear 4xx before any search or bulk
-- operation runs (PostgreSQL is the only complete jsonpath parser at hand).
SELECT $1::text::jsonpath::text AS path;
