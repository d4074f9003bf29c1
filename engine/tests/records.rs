//! The conformance suite of records (issue 29, SPEC C12: the answers index by operation
//! id, first answer wins): one set of checks — an absent key, the first write kept, a
//! lost reply's retry answered "ours", racing writers agreeing on one winner, limits —
//! run against local files, S3 (a real SeaweedFS) and DynamoDB (a real `dynalite`,
//! npm 4.0.0, started by this test on loopback), DynamoDB directly and through a
//! fault-injecting proxy (500s, dropped connections, truncated bodies, duplicated
//! requests, a server that ignores the condition). What Grid signed is checked against
//! an independent signer (botocore, pinned in adapters/peers/requirements.txt), and what
//! it wrote is read back by that independent client.

use std::path::PathBuf;
use std::sync::Arc;

use grid_engine::store::archive::{ArchiveError, LocalFiles};
use grid_engine::store::dynamodb::dynalite;
use grid_engine::store::records::{BlobRecords, First, Records};

mod common;
use common::{Fault, Proxy};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grid-records-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The checks every record store passes. `records` starts empty.
fn conformance(records: &dyn Records) {
    assert_eq!(records.get("op-1").unwrap(), None);
    // The first write wins; the same bytes again (a retry) are ours; others theirs.
    assert_eq!(records.put_first("op-1", b"answer-1").unwrap(), First::Ours);
    assert_eq!(records.put_first("op-1", b"answer-1").unwrap(), First::Ours);
    assert_eq!(
        records.put_first("op-1", b"answer-2").unwrap(),
        First::Theirs(b"answer-1".to_vec())
    );
    assert_eq!(records.get("op-1").unwrap().unwrap(), b"answer-1");
    // Any key text, any bytes, an empty value.
    let key = "plant-ops/route:to-site/op id with spaces/ü";
    let bytes: Vec<u8> = (0..=255u8).collect();
    assert_eq!(records.put_first(key, &bytes).unwrap(), First::Ours);
    assert_eq!(records.get(key).unwrap().unwrap(), bytes);
    assert_eq!(records.put_first("empty", b"").unwrap(), First::Ours);
    assert_eq!(records.get("empty").unwrap().unwrap(), b"");
    // Limits: refused by name, nothing written.
    let long = "k".repeat(grid_engine::limits::RECORD_KEY_BYTES_MAX + 1);
    assert!(records.put_first(&long, b"x").is_err());
    assert!(records.put_first("", b"x").is_err());
    let big = vec![7u8; grid_engine::limits::RECORD_VALUE_BYTES_MAX + 1];
    let refused = records.put_first("big", &big).unwrap_err().to_string();
    assert!(refused.contains("RECORD_VALUE_BYTES_MAX"), "{refused}");
    assert_eq!(records.get("big").unwrap(), None);
    // Many keys, each its own.
    for i in 0..50 {
        assert_eq!(
            records
                .put_first(&format!("many-{i}"), format!("v{i}").as_bytes())
                .unwrap(),
            First::Ours
        );
    }
    for i in (0..50).step_by(7) {
        assert_eq!(
            records.get(&format!("many-{i}")).unwrap().unwrap(),
            format!("v{i}").as_bytes()
        );
    }
    // A scan by prefix: every record under it, page by page, each once, and none else.
    let mut scanned = std::collections::BTreeMap::new();
    let mut after: Option<String> = None;
    for _ in 0..100 {
        let page = records.scan("many-", after.as_deref()).unwrap();
        for (key, value) in page.records {
            assert!(
                scanned.insert(key, value).is_none(),
                "a record scanned twice"
            );
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(scanned.len(), 50);
    assert!((0..50).all(|i| scanned[&format!("many-{i}")] == format!("v{i}").as_bytes()));
    assert!(records.scan("nothing-", None).unwrap().records.is_empty());
    let ours = records.scan("plant-ops/", None).unwrap();
    assert_eq!(ours.records, vec![(key.to_owned(), bytes.clone())]);
}

/// Eight writers put different values under one key at once: exactly one is ours, and
/// every other sees that one's value.
fn race(records: Arc<dyn Records>) {
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let records = records.clone();
            std::thread::spawn(move || {
                let value = format!("writer-{i}").into_bytes();
                (value.clone(), records.put_first("raced", &value).unwrap())
            })
        })
        .collect();
    let results: Vec<(Vec<u8>, First)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let winners: Vec<&Vec<u8>> = results
        .iter()
        .filter(|(_, f)| *f == First::Ours)
        .map(|(v, _)| v)
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = winners[0].clone();
    for (value, first) in &results {
        if *value != winner {
            assert_eq!(*first, First::Theirs(winner.clone()));
        }
    }
    assert_eq!(records.get("raced").unwrap().unwrap(), winner);
}

#[test]
fn local_files_conform() {
    let dir = scratch("files");
    let records = BlobRecords::new(LocalFiles::open(&dir).unwrap(), "records/");
    conformance(&records);
    race(Arc::new(BlobRecords::new(
        LocalFiles::open(&dir.join("raced")).unwrap(),
        "records/",
    )));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn s3_records_on_seaweedfs_conform() {
    let weed = grid_engine::store::s3::seaweed::Server::start(scratch("weed")).unwrap();
    let blobs = weed.blobs("records-test", &weed.endpoint()).unwrap();
    conformance(&BlobRecords::new(blobs, "records/"));
    let raced = weed.blobs("records-raced", &weed.endpoint()).unwrap();
    race(Arc::new(BlobRecords::new(raced, "records/")));
}

#[test]
fn dynamodb_on_dynalite_conforms_and_botocore_reads_and_signs_alike() {
    let server = dynalite::Server::start().unwrap();
    let table = server.table("grid-answers", &server.endpoint()).unwrap();
    table.check().unwrap();
    conformance(&table);
    race(Arc::new(
        server.table("grid-raced", &server.endpoint()).unwrap(),
    ));
    // An independent client (botocore) reads what Grid wrote, and signs the same
    // request to the same Authorization header.
    let script = r#"
import sys, json, base64
import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
endpoint, key, secret, date, body = sys.argv[1:6]
session = botocore.session.get_session()
client = session.create_client("dynamodb", region_name="us-east-1", endpoint_url=endpoint,
    aws_access_key_id=key, aws_secret_access_key=secret)
item = client.get_item(TableName="grid-answers", Key={"k": {"S": "op-1"}}, ConsistentRead=True)
request = AWSRequest(method="POST", url=endpoint + "/", data=body.encode(), headers={
    "Content-Type": "application/x-amz-json-1.0",
    "X-Amz-Target": "DynamoDB_20120810.GetItem"})
class Fixed(SigV4Auth):
    def _modify_request_before_signing(self, request):
        request.headers["X-Amz-Date"] = date
        request.headers["Host"] = endpoint.split("://")[1]
    def add_auth(self, request):
        request.context["timestamp"] = date
        self._modify_request_before_signing(request)
        canonical = self.canonical_request(request)
        string_to_sign = self.string_to_sign(request, canonical)
        signature = self.signature(string_to_sign, request)
        self._inject_signature_to_request(request, signature)
Fixed(Credentials(key, secret), "dynamodb", "us-east-1").add_auth(request)
print(json.dumps({"value": item["Item"]["v"]["B"].decode(), "authorization": request.headers["Authorization"]}))
"#;
    let body = r#"{"TableName":"grid-answers","Key":{"k":{"S":"op-1"}}}"#;
    let date = "20261205T120000Z";
    let out = std::process::Command::new("python3")
        .args(["-c", script, &server.endpoint()])
        .args([dynalite::ACCESS_KEY, dynalite::SECRET_KEY, date, body])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "botocore (pip install -r adapters/peers/requirements.txt): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["value"], "answer-1");
    let ours = table.signed("GetItem", body.as_bytes(), date);
    let authorization = &ours.iter().find(|(n, _)| n == "authorization").unwrap().1;
    assert_eq!(answer["authorization"].as_str().unwrap(), authorization);
    // A table that is not there, or keyed otherwise: refused by name.
    let missing = grid_engine::store::dynamodb::DynamoRecords::new(
        "grid-missing",
        &server.endpoint(),
        "us-east-1",
        &grid_engine::store::s3::AccessKeys::new(dynalite::ACCESS_KEY, dynalite::SECRET_KEY),
    )
    .unwrap();
    let refused = missing.check().unwrap_err().to_string();
    assert!(
        refused.contains("dynamodb://grid-missing") && refused.contains("does not exist"),
        "{refused}"
    );
}

/// Through a faulty network: every fault is an error naming the table, or an answer
/// that is true — never a wrong answer; a put whose answer was lost, sent again,
/// answers ours; a duplicated put answers ours; a server that ignores the condition is
/// refused by `check`.
#[test]
fn dynamodb_through_a_faulty_proxy_errs_or_answers_truly() {
    let server = dynalite::Server::start().unwrap();
    let proxy = Proxy::start(server.port);
    let table = server.table("grid-faults", &proxy.endpoint()).unwrap();
    conformance(&table);
    let named = |e: ArchiveError| {
        let text = e.to_string();
        assert!(text.contains("dynamodb://grid-faults"), "{text}");
    };
    // A 500: an error, nothing written.
    proxy.inject(&[Fault::ServerError]);
    named(table.put_first("f-1", b"one").unwrap_err());
    assert_eq!(table.get("f-1").unwrap(), None);
    // Written, then the connection dropped: an error; the retry finds its own bytes.
    proxy.inject(&[Fault::DropAfterForwarding]);
    named(table.put_first("f-2", b"two").unwrap_err());
    assert_eq!(table.put_first("f-2", b"two").unwrap(), First::Ours);
    // Written, the answer cut: an error, never a misread answer; the retry is ours.
    proxy.inject(&[Fault::TruncateBody]);
    assert!(table.put_first("f-3", b"three").is_err());
    assert_eq!(table.put_first("f-3", b"three").unwrap(), First::Ours);
    // A get whose answer is cut: an error, not "absent".
    proxy.inject(&[Fault::TruncateBody]);
    assert!(table.get("f-3").is_err());
    // Duplicated: the second finds the first; the answer is still ours.
    proxy.inject(&[Fault::Duplicate, Fault::Duplicate]);
    assert_eq!(table.put_first("f-4", b"four").unwrap(), First::Ours);
    // One request a get, when nothing is injected.
    let before = proxy.served.load(std::sync::atomic::Ordering::SeqCst);
    table.get("f-4").unwrap();
    assert_eq!(
        proxy.served.load(std::sync::atomic::Ordering::SeqCst),
        before + 1
    );
    // Another writer's value: theirs.
    assert_eq!(
        table.put_first("f-4", b"other").unwrap(),
        First::Theirs(b"four".to_vec())
    );
    // A server that ignores the condition (answers 200 where it refused): the check
    // refuses the table.
    proxy
        .lenient
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let refused = table.check().unwrap_err().to_string();
    assert!(
        refused.contains("does not keep the first write"),
        "{refused}"
    );
    proxy
        .lenient
        .store(false, std::sync::atomic::Ordering::SeqCst);
    table.check().unwrap();
}
