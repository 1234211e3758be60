-- All schedules, by name (a deployment has tens, not millions). No parameters.
SELECT * FROM dl_schedules ORDER BY name;
