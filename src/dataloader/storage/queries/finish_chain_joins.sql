-- Fan-in for plain chains (0032), included by finish_chain_next.sql (the chain step of both
-- finishes) after its `join_rows` CTE: the next rows that are
-- a join stage (`join_members`: its members' job ids, in the Then's order). The join and its
-- members are recorded by the statement that inserts them, so a join exists exactly when its
-- stages do. Members carry no idempotency key (model/chain.py's Then), so every one is inserted.
chain_joins AS (
    INSERT INTO dl_chain_joins (join_job_id, remaining, members, delay_sec)
    SELECT (r.n->>'job_id')::uuid, jsonb_array_length(r.n->'join_members'), jsonb_array_length(r.n->'join_members'),
           (r.n->>'join_delay_sec')::float8
    FROM join_rows r
    RETURNING join_job_id
), chain_join_members AS (
    INSERT INTO dl_chain_join_members (job_id, join_job_id, position)
    SELECT m.member::uuid, (r.n->>'job_id')::uuid, m.position
    FROM join_rows r, jsonb_array_elements_text(r.n->'join_members') WITH ORDINALITY AS m(member, position)
    RETURNING job_id
),
