-- One schedule by name. $1 name.
SELECT * FROM dl_schedules WHERE name = $1;
