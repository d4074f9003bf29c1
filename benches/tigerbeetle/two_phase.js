#!/usr/bin/env node
// ledger_compare's TigerBeetle side (BENCHMARKS.md, "Ledger beside TigerBeetle and
// PostgreSQL"): two-phase transfers in batches, driven by the official Node client
// (`tigerbeetle-node`, pinned in package.json to the release the replica is built from).
//
//   node two_phase.js --address PORT --accounts N --connections C --batch B \
//       --warmup S --seconds S --id-base X
//
// It creates accounts 1..N (ledger 1, code 1, no flags) unless they exist, then runs
// C clients (one session each, one request in flight each) back to back: a batch of
// B pending transfers (`flags.pending`, random debit and credit accounts, never the
// same, amount 1..1000), then a batch of B posts of exactly those pendings
// (`flags.post_pending_transfer`, `pending_id`, amount `amount_max`: the whole pending
// amount). Every transfer id is new: X + a counter.
//
// Stdout is JSON lines, times in ms since this process's origin:
//   {"event":"ready","accounts_created":N}
//   {"event":"window","at_ms":T}          the warm-up is over (the parent starts its CPU meter)
//   {"event":"unit","connection":i,"pending_start_ms":..,"pending_end_ms":..,
//    "post_start_ms":..,"post_end_ms":..,"posted":n,"failures":{"STATUS":k}}
//   {"event":"done","window_from_ms":..,"window_end_ms":..}
//   {"event":"check",...}                 balances summed over every account afterwards
// A failure of anything else is a message on stderr and exit status 1.
"use strict";

const tb = require("tigerbeetle-node");

function parse(argv) {
  const args = {};
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "").replace(/-/g, "_");
    args[key] = argv[i + 1];
  }
  for (const key of ["address", "accounts", "connections", "batch", "warmup", "seconds", "id_base"]) {
    if (args[key] === undefined) throw new Error(`missing --${key.replace(/_/g, "-")}`);
  }
  return {
    address: args.address,
    accounts: Number(args.accounts),
    connections: Number(args.connections),
    batch: Number(args.batch),
    warmupMs: Number(args.warmup) * 1000,
    secondsMs: Number(args.seconds) * 1000,
    idBase: BigInt(args.id_base),
  };
}

const origin = process.hrtime.bigint();
const nowMs = () => Number(process.hrtime.bigint() - origin) / 1e6;
const emit = (object) =>
  process.stdout.write(JSON.stringify(object, (_, v) => (typeof v === "bigint" ? v.toString() : v)) + "\n");
const statusName = (status, names) => names[status] ?? `status ${status}`;

// A small deterministic generator per connection (xorshift32).
function generator(seed) {
  let state = (seed * 2654435761) >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state;
  };
}

async function createAccounts(client, n) {
  let created = 0;
  for (let first = 1; first <= n; first += 8189) {
    const batch = [];
    for (let id = first; id < Math.min(first + 8189, n + 1); id++) {
      batch.push({
        id: BigInt(id), debits_pending: 0n, debits_posted: 0n, credits_pending: 0n,
        credits_posted: 0n, user_data_128: 0n, user_data_64: 0n, user_data_32: 0,
        reserved: 0, ledger: 1, code: 1, flags: 0, timestamp: 0n,
      });
    }
    const results = await client.createAccounts(batch);
    for (const r of results) {
      if (r.status === tb.CreateAccountStatus.created) created++;
      else if (r.status !== tb.CreateAccountStatus.exists) {
        throw new Error(`create account: ${statusName(r.status, tb.CreateAccountStatus)}`);
      }
    }
  }
  return created;
}

async function main() {
  const a = parse(process.argv);
  const clients = [];
  for (let i = 0; i < a.connections; i++) {
    clients.push(tb.createClient({ cluster_id: 0n, replica_addresses: [a.address] }));
  }
  const created = await createAccounts(clients[0], a.accounts);
  emit({ event: "ready", accounts_created: created });

  const windowFrom = nowMs() + a.warmupMs;
  const windowEnd = windowFrom + a.secondsMs;
  setTimeout(() => emit({ event: "window", at_ms: nowMs() }), Math.max(0, windowFrom - nowMs()));
  let nextId = a.idBase;
  let postedAmount = 0n;
  let postedCount = 0;

  const connection = async (i, client) => {
    const random = generator(i + 1);
    while (nowMs() < windowEnd) {
      const pendings = new Array(a.batch);
      for (let k = 0; k < a.batch; k++) {
        const debit = (random() % a.accounts) + 1;
        const credit = ((debit - 1 + 1 + (random() % (a.accounts - 1))) % a.accounts) + 1;
        pendings[k] = {
          id: nextId++, debit_account_id: BigInt(debit), credit_account_id: BigInt(credit),
          amount: BigInt((random() % 1000) + 1), pending_id: 0n, user_data_128: 0n,
          user_data_64: 0n, user_data_32: 0, timeout: 0, ledger: 1, code: 1,
          flags: tb.TransferFlags.pending, timestamp: 0n,
        };
      }
      const failures = {};
      const fail = (status, names) => {
        const name = statusName(status, names);
        failures[name] = (failures[name] ?? 0) + 1;
      };
      const pendingStart = nowMs();
      const pendingResults = await client.createTransfers(pendings);
      const pendingEnd = nowMs();
      const posts = [];
      const amounts = [];
      pendingResults.forEach((r, k) => {
        if (r.status === tb.CreateTransferStatus.created) {
          posts.push({
            id: nextId++, debit_account_id: 0n, credit_account_id: 0n, amount: tb.amount_max,
            pending_id: pendings[k].id, user_data_128: 0n, user_data_64: 0n, user_data_32: 0,
            timeout: 0, ledger: 0, code: 0, flags: tb.TransferFlags.post_pending_transfer,
            timestamp: 0n,
          });
          amounts.push(pendings[k].amount);
        } else {
          fail(r.status, tb.CreateTransferStatus);
        }
      });
      if (pendingResults.length !== pendings.length) {
        failures["answers missing"] = pendings.length - pendingResults.length;
      }
      const postStart = nowMs();
      const postResults = await client.createTransfers(posts);
      const postEnd = nowMs();
      let posted = 0;
      postResults.forEach((r, k) => {
        if (r.status === tb.CreateTransferStatus.created) {
          posted++;
          postedAmount += amounts[k];
        } else {
          fail(r.status, tb.CreateTransferStatus);
        }
      });
      postedCount += posted;
      emit({
        event: "unit", connection: i, pending_start_ms: pendingStart, pending_end_ms: pendingEnd,
        post_start_ms: postStart, post_end_ms: postEnd, posted, failures,
      });
    }
  };
  await Promise.all(clients.map((client, i) => connection(i, client)));
  emit({ event: "done", window_from_ms: windowFrom, window_end_ms: windowEnd });

  // Every account's balances, summed: what the replica holds after the run.
  let debitsPosted = 0n, creditsPosted = 0n, debitsPending = 0n, creditsPending = 0n;
  for (let first = 1; first <= a.accounts; first += 8189) {
    const ids = [];
    for (let id = first; id < Math.min(first + 8189, a.accounts + 1); id++) ids.push(BigInt(id));
    for (const account of await clients[0].lookupAccounts(ids)) {
      debitsPosted += account.debits_posted;
      creditsPosted += account.credits_posted;
      debitsPending += account.debits_pending;
      creditsPending += account.credits_pending;
    }
  }
  emit({
    event: "check", posted_by_this_run: postedCount, posted_amount_by_this_run: postedAmount,
    debits_posted: debitsPosted, credits_posted: creditsPosted,
    debits_pending: debitsPending, credits_pending: creditsPending,
  });
  for (const client of clients) client.destroy();
}

main().catch((error) => {
  process.stderr.write(`two_phase.js: ${error.stack ?? error}\n`);
  process.exit(1);
});
