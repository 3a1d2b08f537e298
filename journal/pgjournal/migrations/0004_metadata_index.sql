-- Lazarus journal, schema version 4: the metadata index. FindConversations
-- reads the conversations holding a pair by (key, hash of the value), in
-- conversation order, so its cost is the page's, not the number of
-- conversations; the hash keeps long values out of the index entries.
CREATE INDEX IF NOT EXISTS lz_metadata_find ON lz_metadata (key, sha256(value), conv);
