-- Placeholder for schema version 4 (taken by another change in progress):
-- it keeps the versions without a gap until that change lands, and is then
-- removed (its own 0004 replaces it). It changes nothing.
SELECT 1;
