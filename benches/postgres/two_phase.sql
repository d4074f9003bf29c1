-- ledger_compare's PostgreSQL side: one two-phase transfer per pgbench transaction
-- script — two database transactions, each one statement (autocommit, so each commits
-- on its own with synchronous_commit=on and fsync=on):
--   (a) pending: insert the transfer (state 'pending') and add its amount to the debit
--       account's debits_pending and the credit account's credits_pending;
--   (b) post: mark it 'posted' only if it is still pending, and move the amount from
--       pending to posted on both accounts (nothing changes when it was not pending).
-- Both accounts are updated by one statement (`id IN (debit, credit)`), which locks
-- them in index order, so two transfers never deadlock. The accounts' CHECK
-- constraints (schema.sql) are the balance checks.
--
-- Variables from the benchmark (`pgbench -D`): accounts, base (a new id range per
-- pgbench run), counter=0 (kept per client across the script's runs).
\set debit random(1, :accounts)
\set offset random(1, :accounts - 1)
\set credit 1 + (:debit - 1 + :offset) % :accounts
\set amount random(1, 1000)
\set counter :counter + 1
\set id :base + :client_id * 1000000000 + :counter
WITH t AS (
    INSERT INTO transfers (id, debit, credit, amount, state)
    VALUES (:id, :debit, :credit, :amount, 'pending')
    RETURNING debit, credit, amount
)
UPDATE accounts a
SET debits_pending = a.debits_pending + CASE WHEN a.id = t.debit THEN t.amount ELSE 0 END,
    credits_pending = a.credits_pending + CASE WHEN a.id = t.credit THEN t.amount ELSE 0 END
FROM t
WHERE a.id IN (t.debit, t.credit);
WITH t AS (
    UPDATE transfers SET state = 'posted'
    WHERE id = :id AND state = 'pending'
    RETURNING debit, credit, amount
)
UPDATE accounts a
SET debits_pending = a.debits_pending - CASE WHEN a.id = t.debit THEN t.amount ELSE 0 END,
    debits_posted = a.debits_posted + CASE WHEN a.id = t.debit THEN t.amount ELSE 0 END,
    credits_pending = a.credits_pending - CASE WHEN a.id = t.credit THEN t.amount ELSE 0 END,
    credits_posted = a.credits_posted + CASE WHEN a.id = t.credit THEN t.amount ELSE 0 END
FROM t
WHERE a.id IN (t.debit, t.credit);
