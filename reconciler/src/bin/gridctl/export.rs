//! `gridctl inspect export NAME`: an export at its gateway, its signed mappings and
//! both sides' receipts, every signature verified offline (docs/exports.md).

use std::process::ExitCode;

use anyhow::bail;
use grid_reconciler::exports::Inspected;
use grid_reconciler::observe::{self, HostStatus};

use crate::Output;
use crate::report::{Report, emit};

impl Report for Shown {
    fn text(&self) -> String {
        let i = &self.0;
        let e = &i.export;
        let d = &e.disclosure;
        let t = &d.terms;
        let yes = |b: bool| if b { "verified" } else { "DOES NOT VERIFY" };
        let mut out = format!(
            "export {} at {}: {}{}\n",
            e.name,
            e.gateway,
            e.state,
            e.refusal
                .as_deref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default()
        );
        out.push_str(&format!(
            "  disclosure by {} (generation {}), {}: {} in {} from position {} → {} in {}{}{}\n",
            d.issuer,
            d.generation,
            yes(i.disclosure_verified),
            t.from,
            t.from_membership,
            d.first,
            t.to,
            t.to_membership,
            t.cell
                .as_deref()
                .map(|c| format!(", cell {c}"))
                .unwrap_or_default(),
            t.expires
                .as_deref()
                .map(|x| format!(", expires {x}"))
                .unwrap_or_default()
        ));
        out.push_str(&format!(
            "  crossed {} value(s), last position of {} {}; mappings {}; receipted on both sides {}\n",
            e.crossed,
            t.from,
            e.forwarded,
            yes(i.mappings_verified),
            i.receipted_both_sides
        ));
        match &i.from_receipt {
            Some(r) => out.push_str(&format!(
                "  A-side receipt: {} signed {} up to {} ({})\n",
                r.recipient,
                r.route,
                r.position,
                yes(r.verified)
            )),
            None => out.push_str(&format!(
                "  A-side receipt: none from {} for {} yet\n",
                e.gateway, t.from
            )),
        }
        for r in &i.to_receipts {
            out.push_str(&format!(
                "  B-side receipt: {} signed {} up to {} ({})\n",
                r.recipient,
                r.route,
                r.position,
                yes(r.verified)
            ));
        }
        for m in &e.mappings {
            out.push_str(&format!(
                "  {} {} → {} {}: {} (epoch {})\n",
                m.from, m.from_position, m.to, m.to_position, m.value, m.epoch
            ));
        }
        out
    }
}

#[derive(serde::Serialize)]
#[serde(transparent)]
struct Shown(Inspected);

/// The host that runs export `name` as its gateway: `host`, or the one among the
/// installed hosts that answers holding it.
fn gateway(state: &std::path::Path, name: &str, host: Option<&str>) -> anyhow::Result<String> {
    if let Some(host) = host {
        return Ok(host.to_owned());
    }
    let observed = observe::each_installed(state, |h| {
        observe::observe_host(h, &observe::host_dir(state, h)).status
    });
    let mut unreachable = Vec::new();
    for (host, status) in observed {
        match status {
            HostStatus::Running(o) => {
                if o.exports
                    .iter()
                    .any(|e| e.name == name && e.role == "gateway")
                {
                    return Ok(host);
                }
            }
            _ => unreachable.push(host),
        }
    }
    let shown = grid_spec::diagnostic::quoted(name);
    if unreachable.is_empty() {
        bail!("no installed host runs export `{shown}`")
    }
    bail!(
        "no running host runs export `{shown}`; not running: {} (or name its gateway with --host)",
        unreachable.join(", ")
    )
}

/// `gridctl inspect export NAME [--host GATEWAY]`: exit 0 when every signature
/// verifies, 1 when one does not, 4 when no host runs it.
pub fn inspect(name: &str, host: Option<&str>, output: &Output) -> anyhow::Result<ExitCode> {
    let gateway = match gateway(&output.state, name, host) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("gridctl: {e}");
            return Ok(ExitCode::from(4));
        }
    };
    let inspected = grid_reconciler::exports::inspect(&output.state, name, &gateway)
        .map_err(anyhow::Error::msg)?;
    let verified = inspected.disclosure_verified
        && inspected.mappings_verified
        && inspected.from_receipt.as_ref().is_none_or(|r| r.verified)
        && inspected.to_receipts.iter().all(|r| r.verified);
    emit(&Shown(inspected), output.json);
    Ok(if verified {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
