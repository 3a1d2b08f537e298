-- Lazarus journal, schema version 3: room on each page of lz_conversations
-- for the new version of a row. Every append moves last_seq; when the row
-- bytes and status stay as they are (most appends), no indexed column
-- changes and the server can write the new version on the same page
-- without an index entry (a HOT update), if the page has room. The setting
-- applies to the pages written from now on.
ALTER TABLE lz_conversations SET (fillfactor = 50);
