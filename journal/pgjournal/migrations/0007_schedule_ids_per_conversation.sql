-- Lazarus journal, schema version 7: schedule ids are per conversation.
--
-- A schedule is named by its conversation and its id, so that two
-- conversations may each hold a schedule of the same id: the primary key
-- becomes (conv, id), which also serves the listing of a conversation's
-- schedules (so lz_schedules_conv goes), and the time index breaks ties by
-- id, then conversation, as ScheduleTimes orders. The rows stay as they
-- are: ids unique across the store are unique per conversation.
-- Re-applying it (a test that rolls the schema back) is harmless.
ALTER TABLE lz_schedules DROP CONSTRAINT IF EXISTS lz_schedules_pkey;
ALTER TABLE lz_schedules ADD CONSTRAINT lz_schedules_pkey PRIMARY KEY (conv, id);
DROP INDEX IF EXISTS lz_schedules_conv;
DROP INDEX IF EXISTS lz_schedules_next;
CREATE INDEX lz_schedules_next ON lz_schedules (next_s, next_n, id, conv);
