-- Staging built for speed (issue 5). The part fence records what each part staged, so
-- process no longer scans the staged rows to count them; stage tables lose their primary
-- key (the part fence and the sink's key already exclude duplicates), become UNLOGGED (they
-- are transient; commit's count check catches rows lost to a crash) and carry a row hash.
alter table onceflow.stage_parts
    add column valid bigint,
    add column dead bigint,
    add column bytes bigint,       -- bytes read (keys + values) for the part
    add column checksum numeric;   -- exact sum of the part's row_hash values

-- Every stage table a sink created before this migration gets the new shape: a table named
-- stage_* with the attempt column the stage tags rows with, in a sink's schema (the
-- ledger's own onceflow.stage_parts, the part fence, keeps its key).
do $$
declare
    t record;
begin
    for t in
        select c.oid::regclass as tbl, con.conname as pkey
        from pg_class c
        join pg_namespace n on n.oid = c.relnamespace and n.nspname <> 'onceflow'
        join pg_attribute a on a.attrelid = c.oid and a.attname = 'attempt' and not a.attisdropped
        left join pg_constraint con on con.conrelid = c.oid and con.contype = 'p'
        where c.relname like 'stage\_%' and c.relkind = 'r'
    loop
        if t.pkey is not null then
            execute format('alter table %s drop constraint %I', t.tbl, t.pkey);
        end if;
        execute format('alter table %s add column if not exists row_hash bigint', t.tbl);
        execute format('alter table %s set unlogged', t.tbl);
    end loop;
end $$;
