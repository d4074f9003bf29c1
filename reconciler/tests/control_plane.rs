//! The operator control plane (issue 36, docs/control-plane.md) in a real browser:
//! Debian's headless Chromium driven through chromedriver (WebDriver, the fantoccini
//! crate) against two real gridd — `hq` serving the page, `plant` an owner it reaches
//! over mutual TLS. Checked: opening every panel moves no owner's request counter
//! (`grid_owner_requests_total`, scraped from both hosts' metrics); "Inspect now" asks
//! the owner exactly once and shows its observation with its age; a reply arriving
//! after the panel that asked was closed is `uncertain`; after kill -9 of the owner an
//! inspection shows `unreachable` and never the old value as current; notes survive
//! navigation; keyboard navigation reaches the skip link and the panels; forms without
//! the CSRF token, from another origin or to another Host are refused and ask nobody.
//! Screenshots of every panel are saved in `target/control-plane/`.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's `chromium` and
//! `chromium-driver`, installed by `.ci/run` and the README): without them the test
//! fails, naming them.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

mod common;

const HQ_METRICS: &str = "127.0.0.1:7693";
const PLANT_METRICS: &str = "127.0.0.1:7694";
const CONTROL: &str = "127.0.0.1:7695";
const DRIVER_PORT: u16 = 7696;
const PANELS: [&str; 15] = [
    "overview",
    "authority",
    "memberships",
    "models",
    "processes",
    "routes",
    "grants",
    "wallet",
    "sources",
    "ledgers",
    "missions",
    "mappings",
    "decisions",
    "storage",
    "operations",
];
/// A bound on every wait in this test.
const WAIT: Duration = Duration::from_secs(30);

fn topology() -> String {
    format!(
        "grid version=1\nmembership ops {{ authority voters=2; }}\n\
         host hq listen=\"127.0.0.1:7691\" metrics=\"{HQ_METRICS}\" {{ member ops; profiles transport authority delivery processes control decisions; control listen=\"{CONTROL}\"; }}\n\
         host plant listen=\"127.0.0.1:7692\" metrics=\"{PLANT_METRICS}\" {{ member ops; profiles transport authority delivery processes decisions; }}\n\
         grant hq-on-plant issuer=plant caller=hq units=5\n\
         grant ballots-plant issuer=hq caller=plant units=5\n\
         decision raise host=hq {{ roster plant; threshold 1; human-gate operator=hq; effect \"input\" model=\"counter\" input=\"n\"; expires-after-hours 1; }}\n\
         route r2 membership=ops class=ordered {{ publisher hq; destination plant; }}\n\
         route r1 membership=ops class=ordered {{ publisher plant; destination hq; }}\n\
         model counter host=plant {{ input n default=0; cell twice \"n * 2\"; }}\n"
    )
}

/// Plain HTTP/1.1 on loopback: the status line, the headers and the body.
fn http(address: &str, request: &str) -> (String, String, String) {
    let mut stream = std::net::TcpStream::connect(address).expect("served");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_owned(), headers.to_lowercase(), body.to_owned())
}

/// Every owner's request count (`grid_owner_requests_total`) both hosts report.
fn owner_requests() -> Vec<String> {
    let mut lines = Vec::new();
    for address in [HQ_METRICS, PLANT_METRICS] {
        let (_, _, body) = http(
            address,
            &format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
        );
        lines.extend(
            body.lines()
                .filter(|l| l.starts_with("grid_owner_requests_total"))
                .map(str::to_owned),
        );
    }
    lines.sort();
    lines
}

fn count(lines: &[String], host: &str, via: &str) -> u64 {
    let series = format!("grid_owner_requests_total{{host=\"{host}\",via=\"{via}\"}} ");
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

struct Driver(Child);

impl Drop for Driver {
    /// chromedriver and every browser it started (its own process group), also when
    /// the test fails.
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this test made; no memory is touched.
        unsafe {
            libc::kill(-(self.0.id() as i32), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

fn chromedriver(dir: &Path) -> Driver {
    for needed in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(
            Path::new(needed).exists(),
            "{needed} is missing: install Debian's chromium and chromium-driver (.ci/run does)"
        );
    }
    let child = Command::new("/usr/bin/chromedriver")
        .process_group(0)
        .arg(format!("--port={DRIVER_PORT}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("chromedriver.log")).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", DRIVER_PORT)).is_err() {
        assert!(started.elapsed() < WAIT, "chromedriver did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Driver(child)
}

async fn browser(profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{DRIVER_PORT}"))
        .await
        .expect("a Chromium session through chromedriver")
}

/// The `data-state` of `owner`'s section on the page shown now.
async fn state(client: &Client, owner: &str) -> String {
    client
        .find(Locator::Css(&format!("section[data-owner=\"{owner}\"]")))
        .await
        .expect("the owner's section")
        .attr("data-state")
        .await
        .unwrap()
        .unwrap_or_default()
}

/// Presses the first button inside `scope` (a CSS selector) and waits until the page
/// the form leads to (not the one pressed: it is marked first) shows `scope` reading
/// `data-state="STATE"`: the element.
async fn press(client: &Client, scope: &str, state: &str) -> fantoccini::elements::Element {
    client
        .execute("document.documentElement.dataset.pressed = 'yes'", vec![])
        .await
        .unwrap();
    click(client, &format!("{scope} button")).await;
    client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(&format!(
            "html:not([data-pressed]) {scope}[data-state=\"{state}\"]"
        )))
        .await
        .unwrap()
}

/// Presses "Inspect OWNER now" (or its storage's) on the page shown and waits until
/// the owner's section reads `state`: the section.
async fn inspect(client: &Client, owner: &str, state: &str) -> fantoccini::elements::Element {
    press(client, &format!("section[data-owner=\"{owner}\"]"), state).await
}

/// Presses "Read barrier of ops now" on the authority panel and waits until the
/// barrier reads `state`: its text.
async fn read_barrier(client: &Client, state: &str) -> String {
    press(client, "div.barrier[data-membership=\"ops\"]", state)
        .await
        .text()
        .await
        .unwrap()
}

/// The text of the first element `css` selects on the page shown.
async fn text_of(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The text of the element `css` selects, once the page shows one.
async fn waited_text(client: &Client, css: &str) -> String {
    client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Clicks the first element `css` selects on the page shown.
async fn click(client: &Client, css: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

async fn screenshot(client: &Client, dir: &Path, name: &str) {
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

fn artefacts() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/control-plane");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn panels_never_ask_owners_and_inspections_say_what_is_known() {
    let dir = common::work_dir("control-plane");
    std::fs::write(dir.join("t.kdl"), topology()).unwrap();
    let (code, text) = common::gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}");
    let state_dir = dir.join("grid-state/hosts");
    let hq_toml = std::fs::read_to_string(state_dir.join("hq/host.toml")).unwrap();
    assert!(
        hq_toml.contains("[[control.owners]]") && hq_toml.contains("name = \"plant\""),
        "{hq_toml}"
    );
    // plant answers an observation 3 s late (failpoint `observe-reply` armed slow).
    let mut plant = common::start_gridd_with(
        &state_dir.join("plant"),
        &dir.join("plant.log"),
        &[("GRID_FAILPOINTS", "observe-reply=slow")],
    )
    .unwrap();
    let _hq = common::start_gridd(&state_dir.join("hq"), &dir.join("hq.log")).unwrap();
    // The authority bootstraps, then takes its second voter (a round each, at most 5).
    for round in 1..=5 {
        let (code, text) = common::gridctl_code(&dir, &["reconcile", "t.kdl"]);
        match code {
            Some(0) => break,
            Some(5) if round < 5 => std::thread::sleep(Duration::from_millis(500)),
            _ => panic!("reconcile round {round}: {text}"),
        }
    }

    // A decision kept at hq: opened, and plant's signed ballot.
    for args in [
        &["decision", "open", "raise", "--value", "5", "--op", "d1"][..],
        &[
            "decision",
            "ballot",
            "raise",
            "--decision",
            "d1",
            "--as",
            "plant",
            "yes",
            "--op",
            "b1",
        ],
    ] {
        let (code, text) = common::gridctl_code(&dir, args);
        assert_eq!(code, Some(0), "{args:?}: {text}");
    }

    // One value hq publishes on r2, receipted by plant (its signed receipt at hq).
    let (code, text) = common::gridctl_code(&dir, &["publish", "r2", "7", "--as", "hq"]);
    assert_eq!(code, Some(0), "{text}");
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, text) = common::gridctl_code(&dir, &["inspect", "receipts", "r2", "--json"]);
        if text.contains("\"highest_position\":1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "plant never receipted r2: {text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Refused without asking anyone: another Host, no CSRF token, another origin.
    let before = owner_requests();
    let (status, _, _) = http(
        CONTROL,
        "GET /panel/overview HTTP/1.1\r\nHost: evil.example:7695\r\nConnection: close\r\n\r\n",
    );
    assert!(status.contains(" 421 "), "{status}");
    let form = "owner=plant&back=%2Fpanel%2Foverview";
    let (status, _, body) = http(
        CONTROL,
        &format!(
            "POST /inspect HTTP/1.1\r\nHost: {CONTROL}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            form.len()
        ),
    );
    assert!(
        status.contains(" 403 ") && body.contains("CSRF"),
        "{status} {body}"
    );
    let (status, headers, page) = http(
        CONTROL,
        &format!("GET /panel/overview HTTP/1.1\r\nHost: {CONTROL}\r\nConnection: close\r\n\r\n"),
    );
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        headers.contains("content-security-policy: default-src 'none'"),
        "{headers}"
    );
    let token = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .expect("the page's CSRF token")
        .to_owned();
    let form = format!("csrf={token}&owner=plant&back=%2Fpanel%2Foverview");
    let (status, _, _) = http(
        CONTROL,
        &format!(
            "POST /inspect HTTP/1.1\r\nHost: {CONTROL}\r\nOrigin: http://evil.example\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            form.len()
        ),
    );
    assert!(status.contains(" 403 "), "{status}");
    assert_eq!(owner_requests(), before, "a refused form asked an owner");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _driver = chromedriver(&dir);
    let shots = artefacts();
    runtime.block_on(async {
        let client = browser(&dir.join("chromium")).await;
        let base = format!("http://{CONTROL}");

        // Every panel, for all owners and for one: no owner's counter moves.
        let before = owner_requests();
        for panel in PANELS {
            client.goto(&format!("{base}/panel/{panel}")).await.unwrap();
            assert_eq!(state(&client, "plant").await, "never", "{panel}");
            assert_eq!(state(&client, "hq").await, "never", "{panel}");
            client
                .goto(&format!("{base}/panel/{panel}?owner=plant"))
                .await
                .unwrap();
            assert!(
                client.find(Locator::Css("section[data-owner=\"hq\"]")).await.is_err(),
                "?owner=plant shows plant only ({panel})"
            );
        }
        assert_eq!(owner_requests(), before, "opening panels asked an owner");

        // Notes survive navigation (local storage).
        client.goto(&format!("{base}/panel/routes")).await.unwrap();
        let notes = client.find(Locator::Id("notes")).await.unwrap();
        notes.send_keys("boiler trip at 14:02").await.unwrap();
        client.goto(&format!("{base}/panel/grants")).await.unwrap();
        let kept = client
            .find(Locator::Id("notes"))
            .await
            .unwrap()
            .prop("value")
            .await
            .unwrap();
        assert_eq!(kept.as_deref(), Some("boiler trip at 14:02"));

        // Keyboard: the first Tab reaches the skip link, the next ones the panels.
        client.goto(&format!("{base}/panel/models")).await.unwrap();
        client
            .find(Locator::Css("body"))
            .await
            .unwrap()
            .send_keys("\u{E004}")
            .await
            .unwrap();
        let focused = client
            .execute("return document.activeElement.textContent", vec![])
            .await
            .unwrap();
        assert_eq!(focused, "Skip to the panel");
        let unlabelled = client
            .execute(
                "return [...document.querySelectorAll('button, textarea')].filter(e => !(e.labels && e.labels.length) && !e.textContent.trim()).length",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(unlabelled, 0, "every control has a label");

        // One explicit inspection: plant asked once, its model shown with its age.
        let before = owner_requests();
        let section = inspect(&client, "plant", "retained")
            .await
            .text()
            .await
            .unwrap();
        assert!(section.contains("counter") && section.contains("observed"), "{section}");
        let after = owner_requests();
        assert_eq!(count(&after, "plant", "transport"), count(&before, "plant", "transport") + 1);
        assert_eq!(count(&after, "hq", "local"), count(&before, "hq", "local"));
        // That one inspection (`Call::Inspect`) brought plant's own parts: its voter
        // as it reported itself, its routes' positions, its Processes — drawn from
        // what is retained, asking nobody again.
        for (panel, expected) in [
            ("authority", "plant's voters reported"),
            ("routes", "At plant: positions, receipts and values owed"),
            ("processes", "Runs received at plant and not finished (0)"),
        ] {
            client.goto(&format!("{base}/panel/{panel}?owner=plant")).await.unwrap();
            let section = text_of(&client, "section[data-owner=\"plant\"]").await;
            assert!(section.contains(expected), "{panel}: {section}");
            if panel == "authority" {
                assert!(section.contains("not a live quorum"), "{section}");
            }
            if panel == "routes" {
                assert!(section.contains("r1") && section.contains("publisher"), "{section}");
            }
        }
        assert_eq!(owner_requests(), after, "opening plant's panels asked nobody");

        // The authority: hq's voter as it reported itself (retained, no quorum
        // claimed), then one explicit read barrier through the leader: `ok`.
        client.goto(&format!("{base}/panel/authority")).await.unwrap();
        let section = inspect(&client, "hq", "retained").await.text().await.unwrap();
        assert!(section.contains("not a live quorum") && section.contains("leader"), "{section}");
        let barrier = read_barrier(&client, "retained").await;
        assert!(barrier.contains("ok"), "{barrier}");
        // The same inspection read hq's routes with their positions (no more calls).
        client.goto(&format!("{base}/panel/routes?owner=hq")).await.unwrap();
        let section = text_of(&client, "section[data-owner=\"hq\"]").await;
        assert!(section.contains("values owed per destination") && section.contains("r1"), "{section}");
        // … and plant's signed receipt of r2, checked with the keys r2 installed.
        assert!(
            section.contains("newest receipt of each destination")
                && section.contains("verified with generation 1 of plant's signing key"),
            "{section}"
        );
        // The same inspection read the decisions hq keeps, each signature checked
        // with the keys hq's policy installed: the Open (hq's) and plant's ballot.
        client.goto(&format!("{base}/panel/decisions?owner=hq")).await.unwrap();
        let section = text_of(&client, "section[data-owner=\"hq\"]").await;
        assert!(
            section.contains("d1")
                && section.contains("passed")
                && section.contains("plant yes")
                && section.contains("2 of 2 verified")
                && section.contains("open → ballot:plant"),
            "{section}"
        );
        // plant's storage, asked apart on its own panel: one more call at plant.
        client.goto(&format!("{base}/panel/storage")).await.unwrap();
        let section = inspect(&client, "plant", "retained").await.text().await.unwrap();
        assert!(section.contains("Journals") && section.contains("Keyspaces"), "{section}");
        // One request asked at hq's processes room: read only, one more local call.
        client.goto(&format!("{base}/panel/processes")).await.unwrap();
        client
            .find(Locator::Id("request"))
            .await
            .unwrap()
            .send_keys("no-such-request")
            .await
            .unwrap();
        let run = press(&client, "div.run", "retained").await.text().await.unwrap();
        assert!(run.contains("holds nothing of request no-such-request"), "{run}");
        let after = owner_requests();
        assert_eq!(count(&after, "hq", "local"), count(&before, "hq", "local") + 3);
        assert_eq!(count(&after, "plant", "transport"), count(&before, "plant", "transport") + 2);
        for panel in PANELS {
            client.goto(&format!("{base}/panel/{panel}")).await.unwrap();
            screenshot(&client, &shots, panel).await;
        }
        assert_eq!(owner_requests(), after, "opening panels asked an owner");

        // `Call::Inspect` over POST /control is taken only from a control plane the
        // files name (host.toml `control-viewers`): plant takes hq's; hq, whose files
        // name no viewer of it, refuses plant's (curl with each one's participant
        // certificate and TLS key).
        let control = |from: &str, to: &str, port: u16| -> String {
            let output = Command::new("curl")
                .current_dir(&dir)
                .args(["-sS", "--max-time", "10"])
                .args(["--cacert", "grid-state/memberships/ops/ca.pem"])
                .args(["--resolve", &format!("{to}.ops.grid:{port}:127.0.0.1")])
                .args(["--cert", &format!("grid-state/hosts/{from}/memberships/ops/participant.pem")])
                .args(["--key", &format!("grid-state/hosts/{from}/keys/tls.key")])
                .arg(format!("https://{to}.ops.grid:{port}/control"))
                .args(["-d", r#"{"call":"inspect"}"#])
                .output()
                .expect("curl is installed (.ci/run installs it)");
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        };
        let taken = control("hq", "plant", 7692);
        assert!(
            taken.contains(r#""reply":"inspection""#) && taken.contains(r#""authorities""#),
            "{taken}"
        );
        let refused = control("plant", "hq", 7691);
        assert!(
            refused.contains(r#""reply":"refused""#) && refused.contains("control-viewers"),
            "{refused}"
        );
        let plant_toml = std::fs::read_to_string(state_dir.join("plant/host.toml")).unwrap();
        assert!(plant_toml.contains(r#"control-viewers = ["hq"]"#), "{plant_toml}");
        let after = owner_requests();

        // The wallet: plant's grant to hq, as plant's retained observation holds it;
        // its surrender confirmed by the grant's name and units, and guarded: plant
        // is asked again just before, and other units than it holds are refused.
        client.goto(&format!("{base}/panel/wallet?owner=plant")).await.unwrap();
        let section = text_of(&client, "section[data-owner=\"plant\"]").await;
        assert!(section.contains("hq-on-plant") && section.contains("not settled"), "{section}");
        client
            .find(Locator::LinkText("Surrender grant hq-on-plant…"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let confirm = client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css("div.confirm[data-grant=\"hq-on-plant\"]"))
            .await
            .unwrap();
        let text = confirm.text().await.unwrap();
        assert!(text.contains("5 unit(s)") && text.contains("cannot be undone"), "{text}");
        let unlabelled = client
            .execute(
                "return [...document.querySelectorAll('button, textarea, input:not([type=hidden])')].filter(e => !(e.labels && e.labels.length) && !e.textContent.trim()).length",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(unlabelled, 0, "every control of the confirmation has a label");
        screenshot(&client, &shots, "wallet-confirm").await;
        // Not ticked: the browser sends nothing.
        confirm
            .find(Locator::Css("button"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let url = client.current_url().await.unwrap();
        assert!(url.as_str().contains("surrender=hq-on-plant"), "{url}");
        assert_eq!(owner_requests(), after, "a confirmation asked an owner");
        // Other units than plant holds: refused, nothing surrendered.
        client
            .execute(
                "document.querySelector(\"input[name='units']\").value = '4'; document.getElementById('confirm').click(); document.querySelector('div.confirm button').click();",
                vec![],
            )
            .await
            .unwrap();
        let refused = waited_text(&client, "div.surrender[data-state=\"unreachable\"]").await;
        assert!(
            refused.contains("not the 4 confirmed") && refused.contains("nothing was surrendered"),
            "{refused}"
        );
        // Confirmed as shown: surrendered at plant, its signed receipt verified.
        client
            .goto(&format!("{base}/panel/wallet?owner=plant&surrender=hq-on-plant"))
            .await
            .unwrap();
        client.find(Locator::Id("confirm")).await.unwrap().click().await.unwrap();
        click(&client, "div.confirm button").await;
        let done = waited_text(&client, "div.surrender[data-state=\"retained\"]").await;
        assert!(
            done.contains("Surrendered") && done.contains("5 unit(s) surrendered in all") && done.contains("true"),
            "{done}"
        );
        screenshot(&client, &shots, "wallet-surrendered").await;
        // The retained table is older than the surrender, and says so.
        let section = text_of(&client, "section[data-owner=\"plant\"]").await;
        assert!(
            section.contains("surrendered after this observation was made")
                && !section.contains("Surrender grant hq-on-plant…"),
            "{section}"
        );
        // plant, inspected again: the grant retired, nothing left to surrender.
        let section = inspect(&client, "plant", "retained").await.text().await.unwrap();
        assert!(
            section.contains("hq-on-plant") && !section.contains("Surrender grant hq-on-plant…"),
            "{section}"
        );
        let after_wallet = owner_requests();
        assert_eq!(
            count(&after_wallet, "plant", "transport"),
            count(&after, "plant", "transport") + 3,
            "two surrenders asked plant once each, and one inspection"
        );
        let after = after_wallet;

        // Closed while the reply is pending: the late reply is `uncertain`. The page
        // itself sends the form and, a second later — plant answers after 3 s —
        // opens another panel (in the page: chromedriver holds its own next command
        // until a pending navigation ends).
        client.goto(&format!("{base}/panel/models")).await.unwrap();
        let button = client
            .find(Locator::Css("section[data-owner=\"plant\"] button"))
            .await
            .unwrap();
        client
            .execute(
                "arguments[0].form.requestSubmit(); setTimeout(() => { window.location.href = '/panel/routes'; }, 1000);",
                vec![serde_json::to_value(&button).unwrap()],
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let deadline = Instant::now() + WAIT;
        loop {
            client.goto(&format!("{base}/panel/models")).await.unwrap();
            let pending = client
                .find(Locator::Css("section[data-owner=\"plant\"]"))
                .await
                .unwrap()
                .attr("data-pending")
                .await
                .unwrap();
            if pending.as_deref() == Some("false") {
                break;
            }
            assert!(Instant::now() < deadline, "the inspection never ended");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert_eq!(state(&client, "plant").await, "uncertain");
        screenshot(&client, &shots, "uncertain").await;
        assert_eq!(
            count(&owner_requests(), "plant", "transport"),
            count(&after, "plant", "transport") + 1
        );

        // The owner killed: an inspection shows it unreachable, the old value only as
        // old, behind a disclosure.
        let _ = plant.0.kill();
        let _ = plant.0.wait();
        let shown = inspect(&client, "plant", "unreachable").await;
        assert!(
            shown.find(Locator::Css("details table")).await.is_ok(),
            "the old value is behind a disclosure"
        );
        assert!(
            shown.find(Locator::Css(":scope > table")).await.is_err(),
            "the old value is never shown as current"
        );
        screenshot(&client, &shots, "unreachable").await;
        // Two voters, one killed: a read barrier cannot be confirmed — `unknown`.
        client.goto(&format!("{base}/panel/authority")).await.unwrap();
        let barrier = read_barrier(&client, "unreachable").await;
        assert!(barrier.contains("unknown"), "{barrier}");
        screenshot(&client, &shots, "barrier-unknown").await;
        // A run hq sends to plant, which is down: hq's wait stays open (unknown), and
        // hq's Processes panel lists it after hq is inspected.
        let (code, text) = common::gridctl_code(
            &dir,
            &["process", "run", "plant", "demo.count", "--as", "hq", "--op", "w9"],
        );
        assert_eq!(code, Some(3), "{text}");
        client.goto(&format!("{base}/panel/processes?owner=hq")).await.unwrap();
        let section = inspect(&client, "hq", "retained").await.text().await.unwrap();
        assert!(
            section.contains("Runs received at hq and not finished (0)")
                && section.contains("w9")
                && section.contains("demo.count"),
            "{section}"
        );
        screenshot(&client, &shots, "processes-open-wait").await;
        client.close().await.unwrap();
    });
    std::fs::remove_dir_all(&dir).unwrap();
}
