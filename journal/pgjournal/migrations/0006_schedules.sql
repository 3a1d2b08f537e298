-- Lazarus journal, schema version 6: scheduled wake-ups.
--
-- One row per schedule, keyed by its id (unique across the store); next_s
-- and next_n are its next occurrence (seconds and nanoseconds), in an index
-- the expiry actor's rebuild reads in time order without the payloads.
-- IF NOT EXISTS: a database whose recorded version was set back (as a test
-- does) applies it again without harm.
CREATE TABLE IF NOT EXISTS lz_schedules (
    id     bytea PRIMARY KEY,
    conv   bytea NOT NULL,
    next_s bigint NOT NULL,
    next_n integer NOT NULL,
    data   bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS lz_schedules_conv ON lz_schedules (conv, id);
CREATE INDEX IF NOT EXISTS lz_schedules_next ON lz_schedules (next_s, next_n, id) INCLUDE (conv);
