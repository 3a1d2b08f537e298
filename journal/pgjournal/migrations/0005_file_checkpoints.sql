-- Lazarus journal, schema version 5: file checkpoints. A blob is named by the SHA-256 of its
-- content; its row is written in the transaction that writes its chunks,
-- so an upload that fails leaves nothing. A checkpoint record names a
-- blob (none for an absent file); the sweeper removes the blobs no record
-- names. path is bytea so records sort bytewise, as in every adapter.
-- IF NOT EXISTS: applying it again (a test that rolls the schema back) is
-- harmless.
CREATE TABLE IF NOT EXISTS lz_file_blobs (
    sha256  bytea PRIMARY KEY,
    size    bigint NOT NULL,
    chunks  integer NOT NULL,
    touched timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS lz_file_chunks (
    sha256 bytea NOT NULL REFERENCES lz_file_blobs ON DELETE CASCADE,
    idx    integer NOT NULL,
    data   bytea NOT NULL,
    PRIMARY KEY (sha256, idx)
);
CREATE TABLE IF NOT EXISTS lz_file_checkpoints (
    conv   bytea NOT NULL,
    seq    bigint NOT NULL,
    path   bytea NOT NULL,
    sha256 bytea,
    data   bytea NOT NULL,
    PRIMARY KEY (conv, seq, path)
);
CREATE INDEX IF NOT EXISTS lz_file_checkpoints_blob ON lz_file_checkpoints (sha256) WHERE sha256 IS NOT NULL;
