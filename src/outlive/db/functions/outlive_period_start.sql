CREATE OR REPLACE FUNCTION outlive_period_start(p_period text, p_next boolean DEFAULT false)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    -- The start of the budget period that holds now (UTC days and months), or of the next one;
    -- NULL for a run's own period.
    SELECT CASE p_period
        WHEN 'DAY' THEN (date_trunc('day', now() AT TIME ZONE 'UTC')
                         + CASE WHEN p_next THEN interval '1 day' ELSE interval '0' END)
                        AT TIME ZONE 'UTC'
        WHEN 'MONTH' THEN (date_trunc('month', now() AT TIME ZONE 'UTC')
                           + CASE WHEN p_next THEN interval '1 month' ELSE interval '0' END)
                          AT TIME ZONE 'UTC'
    END
$$;
