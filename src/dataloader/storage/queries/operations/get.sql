-- One operation by id ($1).
SELECT * FROM dl_operations WHERE operation_id = $1;
