//! Topology files as data: every `*.kdl` under `tests/data/` is loaded, and what
//! `grid_spec` says about it — a summary when valid, the rendered diagnostics when not —
//! must equal the `*.kdl.expected` file beside it. A new case is a new file.
//!
//! `GRID_BLESS=1 cargo test -p grid-spec --test topology` writes the expected files;
//! review the diff before committing it.

use std::fmt::Write;
use std::path::Path;

use miette::{GraphicalReportHandler, GraphicalTheme};

fn describe(path: &Path, text: &str) -> String {
    let name = path
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path)
        .display()
        .to_string();
    match grid_spec::load_str(&name, text) {
        Ok(topology) => {
            let mut out = String::from("valid\n");
            for h in &topology.hosts {
                let profiles: Vec<&str> = h.profiles.iter().map(|p| p.name()).collect();
                let metrics = h
                    .metrics
                    .map(|m| format!(" metrics={m}"))
                    .unwrap_or_default();
                let control: Vec<String> = h
                    .control
                    .iter()
                    .map(|c| match &c.operators {
                        Some(o) => format!(
                            "{} operators={}{}",
                            c.listen,
                            o.ca.display(),
                            match (&o.certificate, &o.key) {
                                (Some(c), Some(k)) =>
                                    format!(" certificate={} key={}", c.display(), k.display()),
                                _ => String::new(),
                            }
                        ),
                        None => c.listen.to_string(),
                    })
                    .collect();
                let metrics = match control.is_empty() {
                    true => metrics,
                    false => format!("{metrics} control={control:?}"),
                };
                let leaving = match h.leaving.is_empty() {
                    true => String::new(),
                    false => format!(" leaving={:?}", h.leaving),
                };
                writeln!(
                    out,
                    "host {} {} members={:?}{leaving} profiles={profiles:?}{metrics}",
                    h.name, h.listen, h.memberships
                )
                .unwrap();
            }
            for m in &topology.memberships {
                writeln!(
                    out,
                    "membership {} voters={:?} revoked={:?}",
                    m.name, m.authority_voters, m.revoked
                )
                .unwrap();
            }
            for m in &topology.models {
                writeln!(
                    out,
                    "model {} host={} items={} operations={} ceiling={} scalar={}{}",
                    m.name,
                    m.host,
                    m.items.len(),
                    m.operations,
                    m.ceiling(),
                    m.scalar,
                    match m.serves.is_empty() {
                        true => String::new(),
                        false => format!(" serves={:?}", m.serves),
                    }
                )
                .unwrap();
            }
            for r in &topology.routes {
                writeln!(
                    out,
                    "route {} {} publisher={} destinations={}",
                    r.name,
                    r.class.name(),
                    r.publisher,
                    r.destinations.len()
                )
                .unwrap();
            }
            for m in &topology.mappings {
                writeln!(
                    out,
                    "mapping {} {} {}x{} publisher={} destinations={}{}",
                    m.name,
                    m.format.name(),
                    m.rows,
                    m.cols,
                    m.publisher,
                    m.destinations.len(),
                    if m.retired { " retired" } else { "" }
                )
                .unwrap();
            }
            for m in &topology.models {
                for x in m.matrices() {
                    writeln!(
                        out,
                        "matrix {}.{} {}x{} from={}",
                        m.name, x.name, x.rows, x.cols, x.mapping
                    )
                    .unwrap();
                }
            }
            for g in &topology.grants {
                writeln!(
                    out,
                    "grant {} {}->{} units={}{}",
                    g.name,
                    g.caller,
                    g.issuer,
                    g.units,
                    g.membership
                        .as_ref()
                        .map(|m| format!(" membership={m}"))
                        .unwrap_or_default()
                )
                .unwrap();
            }
            for m in &topology.missions {
                writeln!(
                    out,
                    "mission {} host={} units={} successor={}",
                    m.name, m.host, m.units, m.successor
                )
                .unwrap();
            }
            for t in &topology.tags {
                writeln!(
                    out,
                    "tag {} host={} source={}",
                    t.name,
                    t.host,
                    t.source.kind()
                )
                .unwrap();
            }
            for e in &topology.exports {
                writeln!(
                    out,
                    "export {} gateway={} {}->{} issuer={} expires={:?} retired={}",
                    e.name, e.gateway, e.from, e.to, e.issuer, e.expires, e.retired
                )
                .unwrap();
            }
            for l in &topology.ledgers {
                writeln!(out, "ledger {} host={}", l.name, l.host).unwrap();
                for a in &l.accounts {
                    writeln!(
                        out,
                        "  account {} currency={} owner={:?} debits-capped={} credits-capped={} retired={}",
                        a.name,
                        a.currency,
                        a.owner,
                        a.debits_must_not_exceed_credits,
                        a.credits_must_not_exceed_debits,
                        a.retired
                    )
                    .unwrap();
                }
            }
            out
        }
        Err(diagnostics) => {
            let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
                .with_width(100)
                .with_links(false);
            let mut out = format!("{diagnostics}\n");
            for diagnostic in diagnostics.iter() {
                handler.render_report(&mut out, diagnostic).unwrap();
            }
            out
        }
    }
}

fn check(path: &Path, text: String) -> datatest_stable::Result<()> {
    let actual = describe(path, &text);
    let expected_path = path.with_extension("kdl.expected");
    if std::env::var_os("GRID_BLESS").is_some() {
        std::fs::write(&expected_path, &actual)?;
        return Ok(());
    }
    let expected = std::fs::read_to_string(&expected_path).map_err(|e| {
        format!(
            "{}: {e} (run with GRID_BLESS=1 to create it)",
            expected_path.display()
        )
    })?;
    if actual != expected {
        return Err(format!(
            "{} differs from what grid-spec says.\n--- expected\n{expected}\n--- actual\n{actual}",
            expected_path.display()
        )
        .into());
    }
    Ok(())
}

datatest_stable::harness! {
    { test = check, root = "tests/data", pattern = r".*\.kdl$" },
}
