CREATE OR REPLACE FUNCTION outlive_advance_line() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH moved AS (
        UPDATE runs SET queued_behind_id = OLD.queued_behind_id, updated_at = now(),
               event_seq = event_seq + 1
         WHERE queued_behind_id = NEW.id AND status = 'QUEUED'
        RETURNING id, event_seq, queued_behind_id)
    INSERT INTO run_events (run_id, seq, type, data)
    SELECT m.id, m.event_seq, 'line',
           jsonb_build_object('settled', NEW.id, 'status', NEW.status,
                              'queuedBehindId', m.queued_behind_id)
      FROM moved m;
    RETURN NULL;
END $$;
