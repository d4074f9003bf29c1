//! `rotate-key HOST key=signing|mail|tls [expect=OUTCOME]` — the operator raises HOST's
//! generation of that key by one in the files (`keys generation=N`,
//! `mail-generation=N` or `tls-generation=N` of its `host` node, written as the next edited copy of the
//! topology, like `edit-topology`) and runs `gridctl reconcile`, whose outcome must be
//! `expect` (default `succeeded`): the host rotates its key and every fellow member
//! learns the new public keys (docs/custody.md).
//!
//! `expire-certificate HOST membership=M` and `renew HOST membership=M`: a certificate
//! ending, and the plan's renewal (docs/memberships.md, "Renewal and expiry");
//! `revoke PARTICIPANT membership=M`: the operator's revocation.

use std::ffi::OsString;

use kdl::{KdlDocument, KdlNode};

use super::{Outcome, Step, check_outcome};
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError};

struct RotateKey {
    host: String,
    /// The `keys` property raised: `generation` or `mail-generation`.
    property: &'static str,
    expect: Outcome,
}

pub fn parse_rotate_key(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("the host whose key rotates")?;
    let property = match node.required("key", "signing|mail")?.as_str() {
        "signing" => "generation",
        "mail" => "mail-generation",
        "tls" => "tls-generation",
        other => {
            return Err(node.error(format!(
                "`key` is `signing`, `mail` or `tls`, not `{other}`"
            )));
        }
    };
    let expect = Outcome::expected(node)?;
    Ok(Box::new(RotateKey {
        host,
        property,
        expect,
    }))
}

fn parse(text: &str) -> Result<KdlDocument, String> {
    text.parse()
        .map_err(|e| format!("the topology does not parse: {e}"))
}

/// The top-level `kind NAME` node of `doc`.
pub(super) fn node_named<'d>(
    doc: &'d mut KdlDocument,
    kind: &str,
    name: &str,
) -> Result<&'d mut KdlNode, String> {
    doc.nodes_mut()
        .iter_mut()
        .find(|n| {
            n.name().value() == kind
                && n.entry(0)
                    .and_then(|e| e.value().as_string())
                    .is_some_and(|n| n == name)
        })
        .ok_or_else(|| format!("no `{kind} {name:?}` node in the topology file"))
}

/// Writes `edited` as the operator's next edit of the topology, says `what`, and runs
/// `gridctl reconcile` of it, whose outcome must be `expect`.
fn edit_and_reconcile(
    cx: &mut Context<'_>,
    current: &std::path::Path,
    edited: &str,
    what: &str,
    expect: Outcome,
) -> Result<(), Failure> {
    let path = super::topology::write_edited(cx, current, edited)?;
    cx.say(format_args!("{what} ({})", cx.show_path(&path)));
    let args: Vec<OsString> = vec!["reconcile".into(), path.into(), "--json".into()];
    let output = cx.gridctl(&args)?;
    check_outcome(cx, &output, expect)?;
    Ok(())
}

/// Raises `property` of `host`'s `keys` node in `text` by one (from 1 when unsaid):
/// the edited text and the new generation.
fn raise(text: &str, host: &str, property: &str) -> Result<(String, i128), String> {
    let mut doc = parse(text)?;
    let children = node_named(&mut doc, "host", host)?.ensure_children();
    if children.get("keys").is_none() {
        children.nodes_mut().push(KdlNode::new("keys"));
    }
    let keys = children.get_mut("keys").expect("just ensured");
    let current = keys
        .entry(property)
        .map_or(Some(1), |e| e.value().as_integer())
        .ok_or_else(|| format!("`keys {property}=` of host `{host}` is not an integer"))?;
    keys.insert(property, current + 1);
    keys.clear_format();
    Ok((doc.to_string(), current + 1))
}

impl Step for RotateKey {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let (current, text) = super::topology::read_current(cx)?;
        let (edited, generation) = raise(&text, &self.host, self.property)
            .map_err(|e| Failure::new("the host's keys raised in the files", e))?;
        let what = format!("{}: keys {}={generation}", self.host, self.property);
        edit_and_reconcile(cx, &current, &edited, &what, self.expect)
    }
}

// ---- expire-certificate ----------------------------------------------------------------

/// `expire-certificate HOST membership=M` — time passes for HOST's certificate in M:
/// it is replaced by one M's authority (in the operator's state) signs for the same
/// participant, serial and TLS key whose validity ended an hour ago, and
/// `enrollment.toml` says so — as a certificate past its end would be. A running gridd
/// reloads it (its membership files changed), so its peers refuse its handshakes.
struct ExpireCertificate {
    host: String,
    membership: String,
}

pub fn parse_expire_certificate(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("the host whose certificate expires")?;
    let membership = node.required("membership", "M")?;
    Ok(Box::new(ExpireCertificate { host, membership }))
}

impl Step for ExpireCertificate {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        use grid_engine::custody::membership;
        let dir = cx.host_dir(&self.host);
        let m = &self.membership;
        let failed =
            |e: String| Failure::new(format!("{}'s certificate in {m} expired", self.host), e);
        let mut held = membership::read_enrollment(&dir, m)
            .map_err(|e| failed(e.to_string()))?
            .ok_or_else(|| failed(format!("{} holds no certificate of {m}", self.host)))?;
        let mut tls = [0u8; 32];
        held.tls
            .strip_prefix("ed25519:")
            .and_then(|h| hex::decode_to_slice(h, &mut tls).ok())
            .ok_or_else(|| failed(format!("its TLS key `{}` is not ed25519", held.tls)))?;
        let now = time::OffsetDateTime::now_utc();
        let end = now - time::Duration::hours(1);
        let pem = membership::certificate(
            &membership::authority_dir(cx.state_dir(), m),
            m,
            &held.participant,
            held.serial,
            &tls,
            now - time::Duration::days(2),
            end,
        )
        .map_err(|e| failed(e.to_string()))?;
        held.not_after = end
            .format(&time::format_description::well_known::Rfc3339)
            .expect("RFC 3339 formats");
        let folder = membership::host_membership_dir(&dir, m);
        let write = |file: &str, bytes: &[u8]| {
            grid_engine::custody::write_private(&folder.join(file), bytes)
                .map_err(|e| failed(e.to_string()))
        };
        // The enrollment first: a gridd reloading between the two sees the old pair.
        write(
            membership::ENROLLMENT_FILE,
            toml::to_string(&held)
                .expect("enrollments serialize")
                .as_bytes(),
        )?;
        write("participant.pem", pem.as_bytes())?;
        cx.say(format_args!(
            "{}: its certificate in {m} (serial {}) ended at {}",
            self.host, held.serial, held.not_after
        ));
        Ok(())
    }
}

// ---- renew --------------------------------------------------------------------------

/// `renew HOST membership=M` — `gridctl reconcile` of the current topology, which must
/// renew HOST's certificate in M (a `~ enrollment HOST in M` transition that
/// succeeded) and end `succeeded`: renewal is a plan transition, due when the
/// certificate expires within the membership's `renew-before-days` or has expired.
struct Renew {
    host: String,
    membership: String,
}

pub fn parse_renew(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("the host whose certificate is renewed")?;
    let membership = node.required("membership", "M")?;
    Ok(Box::new(Renew { host, membership }))
}

impl Step for Renew {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let topology = cx.topology()?;
        let args: Vec<OsString> = vec!["reconcile".into(), topology.into(), "--json".into()];
        let output = cx.gridctl(&args)?;
        let json = check_outcome(cx, &output, Outcome::Succeeded)?;
        let name = format!("{} in {}", self.host, self.membership);
        let renewed = json["transitions"].as_array().is_some_and(|ts| {
            ts.iter().any(|t| {
                t["kind"] == "enrollment"
                    && t["name"] == name.as_str()
                    && t["op"] == "~"
                    && t["status"] == "succeeded"
            })
        });
        if !renewed {
            return Err(Failure::new(
                format!("`~ enrollment {name}` (renew) applied"),
                "no such transition in the reconcile",
            ));
        }
        Ok(())
    }
}

// ---- revoke -------------------------------------------------------------------------

/// `revoke PARTICIPANT membership=M [expect=OUTCOME]` — the operator revokes
/// PARTICIPANT in M in the files (`revoke PARTICIPANT` added to the `membership M`
/// node, written as the next edited copy of the topology, like `edit-topology`) and
/// runs `gridctl reconcile`, whose outcome must be `expect` (default `succeeded`;
/// `attention` while the revoked host's own `member M` line remains, a `!` line).
struct Revoke {
    participant: String,
    membership: String,
    expect: Outcome,
}

pub fn parse_revoke(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let participant = node.argument("the participant revoked")?;
    let membership = node.required("membership", "M")?;
    let expect = Outcome::expected(node)?;
    Ok(Box::new(Revoke {
        participant,
        membership,
        expect,
    }))
}

/// `text` with `revoke participant` added to `membership`'s node.
fn add_revocation(text: &str, membership: &str, participant: &str) -> Result<String, String> {
    let mut doc = parse(text)?;
    let children = node_named(&mut doc, "membership", membership)?.ensure_children();
    let mut revoke = KdlNode::new("revoke");
    revoke.push(participant.to_owned());
    children.nodes_mut().push(revoke);
    Ok(doc.to_string())
}

impl Step for Revoke {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let (current, text) = super::topology::read_current(cx)?;
        let edited = add_revocation(&text, &self.membership, &self.participant)
            .map_err(|e| Failure::new("the revocation written in the files", e))?;
        let what = format!("revoke {} in {}", self.participant, self.membership);
        edit_and_reconcile(cx, &current, &edited, &what, self.expect)
    }
}

#[cfg(test)]
mod tests {
    use super::raise;

    #[test]
    fn raises_the_named_generation_of_one_host_only() {
        let text = "host a listen=\"x\" {\n    keys generation=2\n}\nhost b listen=\"y\"\n";
        let (edited, g) = raise(text, "a", "generation").unwrap();
        assert_eq!(g, 3);
        assert!(edited.contains("generation=3"), "{edited}");
        let (edited, g) = raise(&edited, "b", "mail-generation").unwrap();
        assert_eq!(g, 2);
        let doc: kdl::KdlDocument = edited.parse().unwrap();
        let b = &doc.nodes()[1];
        assert_eq!(
            b.children().unwrap().get_arg("mail-generation"),
            None,
            "a property, not an argument"
        );
        assert_eq!(
            b.children()
                .unwrap()
                .get("keys")
                .unwrap()
                .entry("mail-generation")
                .unwrap()
                .value()
                .as_integer(),
            Some(2)
        );
        assert!(raise(text, "c", "generation").is_err());
    }

    #[test]
    fn a_revocation_is_added_to_the_named_membership() {
        let text = "membership ops {\n    authority voters=1\n}\nmembership util\n";
        let edited = super::add_revocation(text, "util", "hq").unwrap();
        assert!(edited.contains("    authority voters=1\n"), "{edited}");
        let doc: kdl::KdlDocument = edited.parse().unwrap();
        let util = doc.nodes()[1].children().unwrap();
        assert_eq!(
            util.get_arg("revoke").and_then(|v| v.as_string()),
            Some("hq")
        );
        assert!(doc.nodes()[0].children().unwrap().get("revoke").is_none());
        assert!(super::add_revocation(text, "nope", "hq").is_err());
    }
}
