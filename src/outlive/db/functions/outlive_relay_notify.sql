CREATE OR REPLACE FUNCTION outlive_relay_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outlive_relay', TG_TABLE_NAME);
    RETURN NULL;
END $$;
