-- Lazarus journal, schema version 3: cheaper writes.
--
-- Room on each page of lz_conversations for the new version of a row.
-- Every append moves last_seq; when the row bytes and status stay as they
-- are (most appends), no indexed column changes and the server can write
-- the new version on the same page without an index entry (a HOT update),
-- if the page has room. The setting applies to the pages written from now
-- on.
ALTER TABLE lz_conversations SET (fillfactor = 50);

-- Records of more than about 2 KB (tool results, the tool call rows that
-- hold them, summaries) are compressed when written: with lz4 rather than
-- the default pglz, which costs the server several times the CPU. Only on
-- a server built with lz4 (PostgreSQL 14 or later; the statements are
-- strings so that older servers do not parse them); the values written
-- before keep their method.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        EXECUTE 'ALTER TABLE lz_events ALTER COLUMN data SET COMPRESSION lz4';
        EXECUTE 'ALTER TABLE lz_tool_calls ALTER COLUMN data SET COMPRESSION lz4';
        EXECUTE 'ALTER TABLE lz_summaries ALTER COLUMN data SET COMPRESSION lz4';
    END IF;
END
$$;
