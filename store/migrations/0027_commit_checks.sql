-- bae_check fails the statement (and so the transaction) when ok is not
-- true: a check the server makes inside a batch that ends with COMMIT, so
-- the COMMIT never runs after a write that went wrong. code is the
-- SQLSTATE (class BA, see store/commitcheck.go), detail its message.
CREATE FUNCTION bae_check(ok boolean, code text, detail text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = detail;
    END IF;
    RETURN true;
END
$$;
