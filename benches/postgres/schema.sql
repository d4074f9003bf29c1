-- ledger_compare's PostgreSQL side (BENCHMARKS.md, "Ledger beside TigerBeetle and
-- PostgreSQL"): accounts with their four balances, and transfers that are pending or
-- posted. Run by the benchmark with `psql -v accounts=N -f schema.sql`.
--
-- The balance checks are the database's own: CHECK constraints evaluated on every
-- update of an account (a pending balance never negative; an account flagged
-- debits_must_not_exceed_credits never has debits pending + posted above its credits
-- posted, and the converse flag likewise). A violation aborts the transaction.
-- Minor units as bigint (TigerBeetle and Grid hold u128; bigint is PostgreSQL's
-- cheapest exact integer, so the comparison favours PostgreSQL here).

CREATE TABLE accounts (
    id bigint PRIMARY KEY,
    debits_pending bigint NOT NULL DEFAULT 0,
    debits_posted bigint NOT NULL DEFAULT 0,
    credits_pending bigint NOT NULL DEFAULT 0,
    credits_posted bigint NOT NULL DEFAULT 0,
    debits_must_not_exceed_credits boolean NOT NULL DEFAULT false,
    credits_must_not_exceed_debits boolean NOT NULL DEFAULT false,
    CHECK (debits_pending >= 0 AND credits_pending >= 0),
    CHECK (NOT debits_must_not_exceed_credits
           OR debits_pending + debits_posted <= credits_posted),
    CHECK (NOT credits_must_not_exceed_debits
           OR credits_pending + credits_posted <= debits_posted)
);

CREATE TABLE transfers (
    id bigint PRIMARY KEY,
    debit bigint NOT NULL REFERENCES accounts (id),
    credit bigint NOT NULL REFERENCES accounts (id),
    amount bigint NOT NULL CHECK (amount > 0),
    state text NOT NULL CHECK (state IN ('pending', 'posted')),
    CHECK (debit <> credit)
);

INSERT INTO accounts (id) SELECT generate_series(1, :accounts);
VACUUM ANALYZE accounts;
