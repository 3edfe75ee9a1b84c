CREATE OR REPLACE FUNCTION outlive_cancel_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outlive_cancel', NEW.id::text);
    RETURN NULL;
END $$;
