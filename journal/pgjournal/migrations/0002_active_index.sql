-- Lazarus journal, schema version 2: the index of ACTIVE conversations.
-- status mirrors the status of the row (Conversation.status, protobuf
-- field 3; 0 when there is no row), written in the same statement as the
-- row; the partial index holds the ACTIVE (1) conversations only, so that
-- listing them costs their number, not the number of conversations.
ALTER TABLE lz_conversations ADD COLUMN status integer NOT NULL DEFAULT 0;

-- The rows written before this version carry their status only inside
-- their protobuf bytes: read field 3 of each (the last occurrence wins, as
-- in protobuf), walking the fields by wire type.
CREATE OR REPLACE FUNCTION pg_temp.lz_row_status(b bytea) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    i      integer := 0;
    n      integer := length(b);
    tag    bigint;
    v      bigint;
    shift  integer;
    c      integer;
    status integer := 0;
BEGIN
    WHILE i < n LOOP
        tag := 0; shift := 0;
        LOOP
            c := get_byte(b, i); i := i + 1;
            IF shift < 63 THEN tag := tag | ((c & 127)::bigint << shift); END IF;
            shift := shift + 7;
            EXIT WHEN c < 128;
        END LOOP;
        IF tag & 7 IN (0, 2) THEN
            v := 0; shift := 0;
            LOOP
                c := get_byte(b, i); i := i + 1;
                IF shift < 63 THEN v := v | ((c & 127)::bigint << shift); END IF;
                shift := shift + 7;
                EXIT WHEN c < 128;
            END LOOP;
            IF tag & 7 = 2 THEN
                IF v < 0 OR v > n - i THEN
                    RAISE EXCEPTION 'lz_conversations: a row does not decode (field length % at byte %)', v, i;
                END IF;
                i := i + v::integer;
            ELSIF tag >> 3 = 3 THEN
                status := CASE WHEN v BETWEEN 0 AND 2147483647 THEN v::integer ELSE -1 END;
            END IF;
        ELSIF tag & 7 = 1 THEN
            i := i + 8;
        ELSIF tag & 7 = 5 THEN
            i := i + 4;
        ELSE
            RAISE EXCEPTION 'lz_conversations: a row does not decode (wire type % at byte %)', tag & 7, i;
        END IF;
    END LOOP;
    RETURN status;
END
$$;

UPDATE lz_conversations SET status = pg_temp.lz_row_status(row) WHERE row IS NOT NULL;
DROP FUNCTION pg_temp.lz_row_status(bytea);

CREATE INDEX lz_conversations_active ON lz_conversations (id) WHERE status = 1;
