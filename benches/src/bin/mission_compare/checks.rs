//! What `mission_compare` checks besides its figures: that the receivers hold exactly
//! the runs that succeeded (each executed once, charged once), and that mission runs
//! still succeed once the issuer — with it the authority's majority — is gone.

use grid_benches::limits::MISSION_COMPARE_OFFLINE_RUNS;
use grid_benches::procs::Result;
use grid_benches::report::{ms, percentile};
use grid_engine::processes::grants::UNITS_PER_RUN;

use crate::grid::{self, GridMission, Mode, Runner};

/// Runs of each way that succeeded (the first checks, the warm-up, invalid samples and
/// the runs after the issuer is killed included): what the receivers must hold.
#[derive(Default)]
pub struct Succeeded {
    pub online: u64,
    pub mission: u64,
}

impl Succeeded {
    pub fn count(&mut self, mode: Mode) {
        match mode {
            Mode::Online => self.online += 1,
            Mode::Mission => self.mission += 1,
        }
    }
}

/// `what` must equal `expected`, else an error naming both.
fn expect_equal(what: &str, held: u64, expected: u64) -> Result<()> {
    if held == expected {
        println!("  {what}: {held} (as expected)");
        Ok(())
    } else {
        Err(format!("{what}: {held}, but {expected} runs succeeded").into())
    }
}

/// `edge`'s own runs and its mission's consumed units.
fn check_edge(grid: &GridMission, succeeded: &Succeeded) -> Result<()> {
    let edge = grid.totals(grid::EDGE)?;
    expect_equal(
        "edge: runs succeeded (as receiver)",
        edge.runs.succeeded,
        succeeded.mission,
    )?;
    expect_equal("edge: demo.count", edge.demo_count, succeeded.mission)?;
    let mission = grid.mission()?;
    expect_equal(
        &format!("edge: mission {} units consumed", grid::MISSION),
        mission.units.consumed,
        succeeded.mission * UNITS_PER_RUN,
    )?;
    println!(
        "  edge: unknown runs {}; mission {} {}, units allocated {}, available {}",
        edge.runs.unknown,
        grid::MISSION,
        mission.state.name(),
        mission.units.allocated,
        mission.units.available
    );
    Ok(())
}

/// What both receivers hold after the samples: every succeeded run executed once
/// (`demo.count`) and charged once (the grant's or the mission's consumed units).
pub fn holdings(grid: &GridMission, succeeded: &Succeeded) -> Result<()> {
    println!();
    println!("what the hosts hold after the samples:");
    let site = grid.totals(grid::SITE)?;
    expect_equal(
        "site: runs succeeded (as receiver)",
        site.runs.succeeded,
        succeeded.online,
    )?;
    expect_equal("site: demo.count", site.demo_count, succeeded.online)?;
    let grant = site
        .grant
        .ok_or_else(|| format!("grant {} not found at site", grid::GRANT))?;
    expect_equal(
        &format!("site: grant {} consumed", grid::GRANT),
        grant.consumed,
        succeeded.online * UNITS_PER_RUN,
    )?;
    println!("  site: unknown runs {}", site.runs.unknown);
    check_edge(grid, succeeded)
}

/// SIGKILLs `site` (the mission's issuer and, of two voters, the authority's
/// majority), then makes [`MISSION_COMPARE_OFFLINE_RUNS`] mission runs — each must
/// succeed, with its receipt — and one online run, which must not.
pub fn offline(
    grid: &mut GridMission,
    runner: &mut Runner,
    succeeded: &mut Succeeded,
) -> Result<()> {
    grid.hosts.procs.kill(&format!("gridd {}", grid::SITE))?;
    println!();
    println!(
        "gridd site SIGKILLed (the mission's issuer; the authority has no majority of its two voters):"
    );
    let mut walls = Vec::with_capacity(MISSION_COMPARE_OFFLINE_RUNS);
    for i in 0..MISSION_COMPARE_OFFLINE_RUNS {
        let timed = runner.run(format!("off-{i}"), Mode::Mission);
        let run = timed.outcome.map_err(|reason| {
            format!("mission run off-{i} did not succeed with site SIGKILLed: {reason}")
        })?;
        runner.check(Mode::Mission, &run)?;
        succeeded.count(Mode::Mission);
        walls.push(timed.wall.as_nanos() as u64);
    }
    walls.sort_unstable();
    println!(
        "  {} of {MISSION_COMPARE_OFFLINE_RUNS} mission runs succeeded, their receipts verified; wall time p50 {}, max {}",
        walls.len(),
        ms(percentile(&walls, 0.5)),
        ms(percentile(&walls, 1.0)),
    );
    let online = runner.run("off-online".to_owned(), Mode::Online);
    match online.outcome {
        Ok(run) => Err(format!("an online run succeeded with site SIGKILLed: {run:?}").into()),
        Err(reason) => {
            println!(
                "  an online run did not succeed, as it must not ({}): {reason}",
                ms(online.wall)
            );
            check_edge(grid, succeeded)
        }
    }
}
