-- Lazarus journal, schema version 1. Ids are bytea (they may hold any
-- byte, NUL included, and sort bytewise); records are protobuf bytes.
CREATE TABLE lz_conversations (
    id       bytea PRIMARY KEY,
    last_seq bigint NOT NULL DEFAULT 0,
    deleted  boolean NOT NULL DEFAULT false,
    row      bytea
);
CREATE TABLE lz_events (
    conv bytea NOT NULL,
    seq  bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (conv, seq)
);
CREATE TABLE lz_summaries (
    conv   bytea NOT NULL,
    to_seq bigint NOT NULL,
    data   bytea NOT NULL,
    PRIMARY KEY (conv, to_seq)
);
CREATE TABLE lz_tool_calls (
    id     bytea PRIMARY KEY,
    conv   bytea NOT NULL,
    status integer NOT NULL,
    data   bytea NOT NULL
);
CREATE INDEX lz_tool_calls_conv ON lz_tool_calls (conv, id);
CREATE INDEX lz_tool_calls_pending ON lz_tool_calls (conv, id) WHERE status = 1;
CREATE TABLE lz_deadlines (
    conv bytea NOT NULL,
    call bytea NOT NULL,
    at_s bigint NOT NULL,
    at_n integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (conv, call)
);
CREATE INDEX lz_deadlines_at ON lz_deadlines (at_s, at_n, call, conv);
CREATE TABLE lz_audit (
    conv      bytea NOT NULL,
    turn_ref  bigint NOT NULL,
    created_s bigint,
    created_n integer,
    data      bytea NOT NULL,
    PRIMARY KEY (conv, turn_ref)
);
CREATE TABLE lz_metadata (
    conv  bytea NOT NULL,
    key   bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (conv, key)
);
