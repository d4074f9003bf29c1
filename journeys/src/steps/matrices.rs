//! Matrices on mappings (issue 34, docs/grdx.md).
//!
//! - `publish-matrix MAPPING as=HOST rows=R cols=C seed=S [count=N] [format="csv"|"grdx"]
//!   [op="ID"] [not-finite=#true] [expect=OUTCOME] [position=N] [detail="TEXT"]` — writes the
//!   seeded matrix (cell [r, c] = S·10⁶ + 1000·r + c + ⅓; `not-finite=#true` makes its last
//!   cell NaN) into the work directory as FORMAT and runs `gridctl publish-matrix
//!   MAPPING --as HOST --file F [--op ID] --json`; the outcome must be `expect`
//!   (default `succeeded`), the position `position` when given, the answer must say
//!   `detail`. `count=N` (1 to 64) publishes N matrices, of seeds S, S+1, … (without
//!   `op`), the k-th expected at `position` + k. Every publication is recorded in
//!   `$WORK/matrices.jsonl` (SHA-256 of its GRDX bytes, outcome, position).
//! - `expect-staged MAPPING [within=S] [held-from=N] [refused-at=HOST refused="TEXT"]` — waits (bounded)
//!   until every destination's receipt covers the publisher's last position n (and,
//!   with `held-from`, until each destination holds from N: the older were purged),
//!   then: the publisher and each destination hold positions without gap up to n, a
//!   destination at least the newest `MAPPING_STAGED_KEPT_MAX` (none purged that fewer
//!   newer versions supersede), the same SHA-256 at every position both hold, each
//!   checked whole again by its host; every publication the journey saw acknowledged is
//!   at its position with its SHA-256 wherever it is held, and nothing is held that no
//!   step published. `refused`: HOST's newest refusal of the mapping says TEXT.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

use grid_engine::grdx::Matrix;
use grid_engine::limits::MAPPING_STAGED_KEPT_MAX;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::delivered::{DELIVERY_SETTLE_TIMEOUT, route_view};
use super::gridctl::gridctl_json;
use super::{Attempt, Outcome, Step, check_outcome, journal, poll};
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError};

const MATRICES_FILE: &str = "matrices.jsonl";

/// One `publish-matrix` the journey sent.
#[derive(Debug, Serialize, Deserialize)]
struct Sent {
    mapping: String,
    sha256: String,
    outcome: String,
    position: Option<u64>,
}

struct PublishMatrix {
    mapping: String,
    host: String,
    rows: u32,
    cols: u32,
    seed: u64,
    grdx: bool,
    op: Option<String>,
    nan: bool,
    expect: Outcome,
    position: Option<u64>,
    detail: Option<String>,
    count: u64,
}

pub fn parse_publish(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let mapping = node.argument("a mapping name")?;
    let host = node.string("as")?.ok_or_else(|| {
        node.error("`publish-matrix` needs as=\"HOST\" (the mapping's publisher)")
    })?;
    let dimension = |node: &mut Node<'_>, key: &str| -> Result<u32, ParseError> {
        match node.count(key)? {
            Some(n) if (1..=256).contains(&n) => Ok(n as u32),
            _ => Err(node.error(format!("`publish-matrix` needs {key}=N, 1 to 256"))),
        }
    };
    let rows = dimension(node, "rows")?;
    let cols = dimension(node, "cols")?;
    let seed = node.count("seed")?.unwrap_or(1);
    let grdx = match node.string("format")?.as_deref() {
        None | Some("csv") => false,
        Some("grdx") => true,
        Some(other) => {
            return Err(node.error(format!("format is \"csv\" or \"grdx\", not {other:?}")));
        }
    };
    let op = node.string("op")?;
    let nan = node.flag("not-finite")?.unwrap_or(false);
    let expect = Outcome::expected(node)?;
    let position = node.count("position")?;
    let detail = node.string("detail")?;
    let count = match node.count("count")? {
        None => 1,
        Some(n) if (1..=64).contains(&n) && op.is_none() => n,
        Some(_) => {
            return Err(node.error(
                "`count` is 1 to 64 matrices, each of its own seed, without `op` (one id publishes one matrix)",
            ));
        }
    };
    Ok(Box::new(PublishMatrix {
        mapping,
        host,
        rows,
        cols,
        seed,
        grdx,
        op,
        nan,
        expect,
        position,
        detail,
        count,
    }))
}

/// The seeded cells, row-major.
fn cells(rows: u32, cols: u32, seed: u64) -> Vec<f64> {
    (0..rows)
        .flat_map(|r| (0..cols).map(move |c| (r, c)))
        .map(|(r, c)| seed as f64 * 1e6 + f64::from(r) * 1000.0 + f64::from(c) + 1.0 / 3.0)
        .collect()
}

impl Step for PublishMatrix {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        for k in 0..self.count {
            self.publish_one(cx, self.seed + k, self.position.map(|p| p + k))?;
        }
        Ok(())
    }
}

impl PublishMatrix {
    /// Publishes the matrix of `seed`, expected at `position` when given.
    fn publish_one(
        &self,
        cx: &mut Context<'_>,
        seed: u64,
        position: Option<u64>,
    ) -> Result<(), Failure> {
        let mut values = cells(self.rows, self.cols, seed);
        // A geometry above GRDX_CELLS_MAX is no matrix: nothing to digest (refused).
        let sha256 = Matrix::new(self.rows, self.cols, values.clone())
            .map(|m| hex::encode(Sha256::digest(m.encode())))
            .unwrap_or_default();
        if self.nan {
            *values.last_mut().expect("at least one cell") = f64::NAN;
        }
        let work = cx.work_dir().to_owned();
        let name = format!(
            "matrix-{}-{}x{}-{}{}.{}",
            self.mapping.replace('/', "_"),
            self.rows,
            self.cols,
            seed,
            if self.nan { "-nan" } else { "" },
            if self.grdx { "grdx" } else { "csv" }
        );
        let file = work.join(name);
        let bytes = if self.grdx {
            // Written by hand, as docs/grdx.md defines it (a NaN cell included).
            let mut out = b"GRDX\x01\x02\x00\x00".to_vec();
            out.extend_from_slice(&self.rows.to_le_bytes());
            out.extend_from_slice(&self.cols.to_le_bytes());
            values
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
            out
        } else {
            let mut text = String::new();
            for row in values.chunks(self.cols as usize) {
                let line: Vec<String> = row.iter().map(|v| format!("{v:?}")).collect();
                text += &line.join(",");
                text.push('\n');
            }
            text.into_bytes()
        };
        std::fs::write(&file, bytes)
            .map_err(|e| Failure::new(format!("to write {}", file.display()), e.to_string()))?;
        let mut args: Vec<OsString> = vec![
            "publish-matrix".into(),
            self.mapping.clone().into(),
            "--as".into(),
            self.host.clone().into(),
            "--file".into(),
            file.into_os_string(),
            "--json".into(),
        ];
        if let Some(op) = &self.op {
            args.extend(["--op".into(), op.into()]);
        }
        let output = cx.gridctl(&args)?;
        let json = check_outcome(cx, &output, self.expect)?;
        super::check_detail(&json, self.detail.as_deref())?;
        if let Some(position) = position
            && json["position"].as_u64() != Some(position)
        {
            return Err(Failure::new(
                format!("position {position}"),
                json.to_string(),
            ));
        }
        journal::append(
            &work,
            MATRICES_FILE,
            &Sent {
                mapping: self.mapping.clone(),
                sha256,
                outcome: json["outcome"].as_str().unwrap_or_default().to_owned(),
                position: json["position"].as_u64(),
            },
        )
    }
}

struct ExpectStaged {
    mapping: String,
    within: Duration,
    held_from: Option<u64>,
    /// (destination, what its newest refusal says)
    refused: Option<(String, String)>,
}

pub fn parse_expect_staged(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let mapping = node.argument("a mapping name")?;
    let within = match node.count("within")? {
        Some(s) if Duration::from_secs(s) <= DELIVERY_SETTLE_TIMEOUT => Duration::from_secs(s),
        Some(_) => {
            return Err(node.error(format!(
                "`within` is at most DELIVERY_SETTLE_TIMEOUT ({} s)",
                DELIVERY_SETTLE_TIMEOUT.as_secs()
            )));
        }
        None => DELIVERY_SETTLE_TIMEOUT,
    };
    let held_from = node.count("held-from")?;
    let refused = match (node.string("refused-at")?, node.string("refused")?) {
        (Some(host), Some(text)) => Some((host, text)),
        (None, None) => None,
        _ => {
            return Err(node.error(
                "`refused` and `refused-at` go together: refused-at=\"HOST\" refused=\"TEXT\"",
            ));
        }
    };
    Ok(Box::new(ExpectStaged {
        mapping,
        within,
        held_from,
        refused,
    }))
}

/// `gridctl inspect mapping MAPPING --host HOST --json`.
fn inspect_mapping(
    cx: &mut Context<'_>,
    mapping: &str,
    host: &str,
) -> Result<serde_json::Value, Failure> {
    gridctl_json(
        cx,
        &["inspect", "mapping", mapping, "--host", host, "--json"],
    )
}

/// What one host holds of a mapping: the lowest position it holds and `position →
/// sha256` of each, and its newest refusal.
struct Held {
    from: u64,
    versions: BTreeMap<u64, String>,
    refused: serde_json::Value,
}

fn held(cx: &mut Context<'_>, mapping: &str, host: &str) -> Result<Held, Failure> {
    let json = inspect_mapping(cx, mapping, host)?;
    Ok(Held {
        from: json["held_from"].as_u64().unwrap_or(1),
        versions: json["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| Some((v["position"].as_u64()?, v["sha256"].as_str()?.to_owned())))
            .collect(),
        refused: json["refused"].clone(),
    })
}

impl Held {
    /// Fails unless `host` holds every position from its `from` up to `newest`.
    fn gapless(&self, host: &str, newest: u64) -> Result<(), Failure> {
        let expected: Vec<u64> = (self.from.max(1)..=newest).collect();
        if self.versions.keys().copied().collect::<Vec<_>>() != expected {
            return Err(Failure::new(
                format!("{host} to hold positions {}..={newest}", self.from),
                format!("{:?}", self.versions.keys().collect::<Vec<_>>()),
            ));
        }
        Ok(())
    }
}

impl Step for ExpectStaged {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let mapping = self.mapping.clone();
        let wanted_from = self.held_from;
        let (publisher, published, staged) = poll(cx, self.within, |cx| {
            let (publisher, published, receipted, _) = route_view(cx, &mapping)?;
            let behind: Vec<_> = receipted.iter().filter(|(_, r)| **r < published).collect();
            if !behind.is_empty() {
                return Ok(Attempt::Again(Failure::new(
                    format!("every destination's receipt to cover position {published}"),
                    format!("{behind:?}"),
                )));
            }
            let mut staged = BTreeMap::new();
            for destination in receipted.keys() {
                let at = held(cx, &mapping, destination)?;
                if let Some(from) = wanted_from
                    && at.from != from
                {
                    return Ok(Attempt::Again(Failure::new(
                        format!("{destination} to hold {mapping} from position {from}"),
                        format!("held from {}", at.from),
                    )));
                }
                staged.insert(destination.clone(), at);
            }
            Ok(Attempt::Done((publisher, published, staged)))
        })?;
        let at_publisher = held(cx, &self.mapping, &publisher)?;
        at_publisher.gapless(&publisher, published)?;
        let sent: Vec<Sent> = journal::read(cx.work_dir(), MATRICES_FILE)?;
        let sent: Vec<&Sent> = sent.iter().filter(|s| s.mapping == self.mapping).collect();
        let kept_from = published.saturating_sub(MAPPING_STAGED_KEPT_MAX) + 1;
        for (host, at) in std::iter::once((&publisher, &at_publisher)).chain(&staged) {
            at.gapless(host, published)?;
            if host != &publisher && at.from > kept_from {
                return Err(Failure::new(
                    format!(
                        "{host} to keep the newest MAPPING_STAGED_KEPT_MAX ({MAPPING_STAGED_KEPT_MAX}) versions, from {kept_from}"
                    ),
                    format!("held from {}", at.from),
                ));
            }
            for (position, sha) in &at.versions {
                if let Some(other) = at_publisher.versions.get(position)
                    && other != sha
                {
                    return Err(Failure::new(
                        format!("{host} to hold the publisher's matrix {position}"),
                        format!("{sha} beside {other}"),
                    ));
                }
                if !sent.is_empty()
                    && !sent
                        .iter()
                        .any(|s| &s.sha256 == sha && s.outcome != "refused")
                {
                    return Err(Failure::new(
                        format!("matrix {position} at {host} to be one the journey published"),
                        sha.clone(),
                    ));
                }
            }
            for s in sent.iter().filter(|s| s.outcome == "succeeded") {
                let position = s.position.unwrap_or_default();
                if position >= at.from && at.versions.get(&position) != Some(&s.sha256) {
                    return Err(Failure::new(
                        format!(
                            "the matrix acknowledged at position {position} to be held at {host}"
                        ),
                        format!("{:?}", at.versions.get(&position)),
                    ));
                }
            }
        }
        if let Some((host, text)) = &self.refused {
            let said = staged.get(host).map(|at| &at.refused);
            if !said
                .and_then(|r| r["reason"].as_str())
                .is_some_and(|r| r.contains(text.as_str()))
            {
                return Err(Failure::new(
                    format!(
                        "{host}'s newest refusal of {} to say {text:?}",
                        self.mapping
                    ),
                    format!("{said:?}"),
                ));
            }
        }
        cx.say(format_args!(
            "{} matrices of {} staged at {} destination(s), each as published, held from {}",
            published,
            self.mapping,
            staged.len(),
            staged
                .values()
                .map(|at| at.from.to_string())
                .collect::<Vec<_>>()
                .join("/")
        ));
        Ok(())
    }
}

// ---- push-matrix -----------------------------------------------------------------------

/// What a crafted push carries.
#[derive(Debug, Clone, Copy)]
enum Craft {
    /// A valid matrix of the mapping's geometry, sealed, one ciphertext byte flipped.
    Tampered,
    /// GRDX bytes whose header says 3 dimensions, sealed.
    ThreeD,
    /// A valid 2 × 2 matrix, sealed: not the mapping's geometry.
    Geometry,
    /// A valid matrix of the mapping's geometry without its last 8 bytes, sealed.
    Truncated,
    /// A header of 145 × 113 = 16,385 cells (one above GRDX_CELLS_MAX), sealed.
    Oversized,
}

struct PushMatrix {
    mapping: String,
    membership: String,
    from: String,
    to: String,
    craft: Craft,
    refused: String,
}

/// `push-matrix MAPPING membership=M from=PUBLISHER to=DEST craft="tampered"|"three-d"|
/// "geometry"|"truncated"|"oversized" refused="TEXT"` — one push of the destination's next position, made by
/// the journey as the publisher (its installation's certificate of M over mutual TLS),
/// carrying a crafted matrix sealed to DEST's mail key. Passes when DEST refuses it
/// saying TEXT, records the refusal (`inspect mapping`: `refused` at that position)
/// and stages nothing of it.
pub fn parse_push(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let mapping = node.argument("a mapping name")?;
    let membership = node
        .string("membership")?
        .ok_or_else(|| node.error("`push-matrix` needs membership=\"M\""))?;
    let from = node.required_host("from")?;
    let to = node.required_host("to")?;
    let craft = match node.string("craft")?.as_deref() {
        Some("tampered") => Craft::Tampered,
        Some("three-d") => Craft::ThreeD,
        Some("geometry") => Craft::Geometry,
        Some("truncated") => Craft::Truncated,
        Some("oversized") => Craft::Oversized,
        _ => {
            return Err(node.error(
                "`push-matrix` needs craft=\"tampered\", \"three-d\", \"geometry\", \"truncated\" or \"oversized\"",
            ));
        }
    };
    let refused = node.string("refused")?.ok_or_else(|| {
        node.error("`push-matrix` needs refused=\"TEXT\" (what the refusal says)")
    })?;
    Ok(Box::new(PushMatrix {
        mapping,
        membership,
        from,
        to,
        craft,
        refused,
    }))
}

impl PushMatrix {
    /// The crafted payload for `position`, sealed to `to`'s mail key.
    fn sealed(
        &self,
        cx: &Context<'_>,
        position: u64,
        rows: u32,
        cols: u32,
    ) -> Result<grid_engine::custody::seal::Sealed, Failure> {
        let manifest = grid_engine::custody::manifest(&cx.host_dir(&self.to))
            .map_err(|e| Failure::new(format!("the public keys of {}", self.to), e.to_string()))?;
        let mail = grid_engine::custody::mail_key_of(&manifest)
            .ok_or_else(|| Failure::new(format!("a mail key of {}", self.to), "none"))?;
        let payload = match self.craft {
            Craft::Tampered | Craft::Truncated => Matrix::new(rows, cols, cells(rows, cols, 9)),
            Craft::Geometry => Matrix::new(2, 2, cells(2, 2, 9)),
            Craft::ThreeD | Craft::Oversized => Matrix::new(1, 1, vec![1.0]),
        }
        .map_err(|e| Failure::new("a valid matrix", e.to_string()))?
        .encode();
        let payload = match self.craft {
            Craft::ThreeD => {
                let mut bytes = payload;
                bytes[5] = 3;
                bytes
            }
            Craft::Truncated => payload[..payload.len() - 8].to_vec(),
            Craft::Oversized => {
                let mut bytes = payload[..16].to_vec();
                bytes[8..12].copy_from_slice(&145u32.to_le_bytes());
                bytes[12..16].copy_from_slice(&113u32.to_le_bytes());
                bytes
            }
            _ => payload,
        };
        let mut sealed = grid_engine::custody::seal::seal_payload(
            &mail,
            &self.mapping,
            &self.membership,
            position,
            &payload,
        )
        .map_err(|e| Failure::new("a sealed matrix", e.to_string()))?;
        if let Craft::Tampered = self.craft {
            let last = sealed.ciphertext.len() / 2;
            sealed.ciphertext[last] ^= 0x01;
        }
        Ok(sealed)
    }
}

impl Step for PushMatrix {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        use grid_engine::delivery::api::{Push, PushReply, WireDelivery, WirePayload};
        let before = inspect_mapping(cx, &self.mapping, &self.to)?;
        let held = before["versions"]
            .as_array()
            .and_then(|v| v.last())
            .and_then(|v| v["position"].as_u64())
            .unwrap_or(0);
        let (rows, cols) = {
            let all = gridctl_json(cx, &["inspect", "routes", "--host", &self.from, "--json"])?;
            let route = all
                .as_array()
                .and_then(|a| a.iter().find(|r| r["route"] == self.mapping.as_str()))
                .cloned()
                .unwrap_or_default();
            let geometry = &route["matrix"];
            match (geometry["rows"].as_u64(), geometry["cols"].as_u64()) {
                (Some(r), Some(c)) => (r as u32, c as u32),
                _ => {
                    return Err(Failure::new(
                        format!("mapping {} at {}", self.mapping, self.from),
                        route.to_string(),
                    ));
                }
            }
        };
        let position = held + 1;
        let push = Push {
            route: self.mapping.clone(),
            deliveries: vec![WireDelivery {
                position,
                previous: held,
                payload: WirePayload::Sealed(self.sealed(cx, position, rows, cols)?),
            }],
        };
        let address = cx.host_listen(&self.to)?;
        let client = grid_engine::transport::PeerClient::new(
            &cx.host_dir(&self.from),
            &self.membership,
            &self.to,
            &address,
        )
        .map_err(|e| {
            Failure::new(
                format!("a client of {} as {}", self.to, self.from),
                e.to_string(),
            )
        })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::new("a runtime", e.to_string()))?;
        let path = format!("/delivery/{}/push", self.membership);
        let reply: PushReply = runtime
            .block_on(client.post(&path, &push, Duration::from_secs(10)))
            .map_err(|e| Failure::new(format!("an answer from {}", self.to), e.to_string()))?;
        cx.say(format_args!(
            "POST {path} to {} as {} ({:?}, position {position}) → {reply:?}",
            self.to, self.from, self.craft
        ));
        match &reply {
            PushReply::Refused { reason } if reason.contains(&self.refused) => {}
            other => {
                return Err(Failure::new(
                    format!("a refusal saying {:?}", self.refused),
                    format!("{other:?}"),
                ));
            }
        }
        let after = inspect_mapping(cx, &self.mapping, &self.to)?;
        if after["versions"] != before["versions"] {
            return Err(Failure::new(
                "nothing staged of it",
                after["versions"].to_string(),
            ));
        }
        if after["refused"]["position"].as_u64() != Some(position)
            || !after["refused"]["reason"]
                .as_str()
                .unwrap_or_default()
                .contains(&self.refused)
        {
            return Err(Failure::new(
                format!("the refusal of position {position} recorded"),
                after["refused"].to_string(),
            ));
        }
        Ok(())
    }
}
