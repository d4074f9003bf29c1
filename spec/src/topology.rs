//! Typed desired state: what a set of topology files says, after validation.
//!
//! Everything here is plain data. A value of [`Topology`] only exists when every file
//! parsed and validated without error, so its users (the reconciler, the engine) may
//! rely on: unique names per kind, resolved references, admitted formulas, and limits
//! within `crate::limits`.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::formula::Expr;

/// Where a node came from: index into [`Topology::sources`] and a byte span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub source: usize,
    pub offset: usize,
    pub length: usize,
}

/// One file read, kept so later diagnostics (from the engine, the reconciler) can
/// point into it.
#[derive(Debug, Clone)]
pub struct Source {
    pub path: PathBuf,
    pub text: String,
}

#[derive(Debug, Clone, Default)]
pub struct Topology {
    pub sources: Vec<Source>,
    pub version: u32,
    pub memberships: Vec<Membership>,
    pub hosts: Vec<Host>,
    pub models: Vec<Model>,
    pub routes: Vec<Route>,
    /// `mapping` nodes: matrices on mappings of their own (issue 34, docs/grdx.md).
    pub mappings: Vec<Mapping>,
    pub grants: Vec<Grant>,
    pub missions: Vec<Mission>,
    pub tags: Vec<Tag>,
    pub exports: Vec<Export>,
    pub ledgers: Vec<Ledger>,
    /// `decision` nodes (issue 35, docs/decisions.md).
    pub decisions: Vec<Decision>,
}

impl Topology {
    pub fn model(&self, name: &str) -> Option<&Model> {
        self.models.iter().find(|m| m.name == name)
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Membership {
    pub name: String,
    /// `authority voters=N`, when the membership runs an authority.
    pub authority_voters: Option<u32>,
    /// `snapshots "file"|"s3://…"` inside `authority`: where its voters keep the Raft
    /// snapshots a new or lagging voter catches up from (docs/storage.md).
    pub snapshots: crate::storage::ArchiveTarget,
    /// Participants revoked explicitly (`revoke PARTICIPANT`).
    pub revoked: Vec<String>,
    /// `certificates valid-days=N`: how long a participant certificate issued in it
    /// is valid (`CERTIFICATE_VALID_DAYS_DEFAULT` when unsaid).
    pub certificate_valid_days: u32,
    /// `certificates renew-before-days=N`: the plan renews a certificate expiring
    /// within N days (`CERTIFICATE_RENEW_BEFORE_DAYS_DEFAULT`, or less than
    /// `valid-days` when that is shorter).
    pub renew_before_days: u32,
    /// `models ceiling=N`: the most counted operations of a model admitted to this
    /// membership by a `serve` line; admission uses [`Membership::models_ceiling`].
    pub declared_models_ceiling: Option<u32>,
    pub origin: Origin,
}

impl Membership {
    /// The most counted operations of a model that serves this membership (`serve M`):
    /// its `models ceiling`, or `MEMBERSHIP_MODELS_CEILING_DEFAULT`.
    pub fn models_ceiling(&self) -> u32 {
        self.declared_models_ceiling
            .unwrap_or(crate::limits::MEMBERSHIP_MODELS_CEILING_DEFAULT)
    }
}

/// Capabilities a host selects explicitly (SPEC §1.1). With none, a host is a plain
/// local model runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Profile {
    Transport,
    Authority,
    Delivery,
    Processes,
    Sources,
    Missions,
    Ledger,
    Exports,
    Control,
    /// Count TLS bytes per peer and direction (off unless selected).
    WireObservation,
    /// The archive wallet: the five Processes of `wallet@1.1.0` and signed archives
    /// (needs `processes`).
    ArchiveWallet,
    /// One model serving several memberships (`serve A`, `serve B`): its own capacity,
    /// routes and receipts per membership, inputs through tickets into one journal
    /// (issue 30; not provided by this build yet: refused by name).
    SharedMemberships,
    /// Decisions (issue 35, docs/decisions.md): a roster's signed ballots, a human
    /// gate and one effect applied once (not provided by this build yet: refused by
    /// name).
    Decisions,
}

impl Profile {
    pub const ALL: [Profile; 13] = [
        Profile::Transport,
        Profile::Authority,
        Profile::Delivery,
        Profile::Processes,
        Profile::Sources,
        Profile::Missions,
        Profile::Ledger,
        Profile::Exports,
        Profile::Control,
        Profile::WireObservation,
        Profile::ArchiveWallet,
        Profile::SharedMemberships,
        Profile::Decisions,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Profile::Transport => "transport",
            Profile::Authority => "authority",
            Profile::Delivery => "delivery",
            Profile::Processes => "processes",
            Profile::Sources => "sources",
            Profile::Missions => "missions",
            Profile::Ledger => "ledger",
            Profile::Exports => "exports",
            Profile::Control => "control",
            Profile::WireObservation => "wire-observation",
            Profile::ArchiveWallet => "archive-wallet",
            Profile::SharedMemberships => "shared-memberships",
            Profile::Decisions => "decisions",
        }
    }

    pub fn from_name(name: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// A `decision` (issue 35, docs/decisions.md): who may vote (a roster fixed when a
/// decision opens), how many ballots in favour carry it, whose operator approves after
/// them, what it applies once, and how long it stays open.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub name: String,
    /// The host that keeps it (profile `decisions`).
    pub host: String,
    /// Declared hosts sharing a membership with `host`, each at most once.
    pub roster: Vec<String>,
    /// Ballots in favour needed: 1 to the roster's size.
    pub threshold: u32,
    /// `human-gate operator=HOST`: the host whose operator signs the approval.
    pub gate: String,
    pub effect: DecisionEffect,
    pub expires_after_hours: u32,
    pub origin: Origin,
}

/// What a decision applies once it is approved.
#[derive(Debug, Clone, PartialEq)]
pub enum DecisionEffect {
    /// `effect "input" model=M input=I`: the decided value into an input nothing else
    /// feeds.
    Input {
        model: String,
        input: String,
        at: Origin,
    },
    /// `effect "ledger.transfer" ledger=L debit=A credit=B currency=C`: one transfer
    /// of the decided amount.
    LedgerTransfer {
        ledger: String,
        debit: String,
        credit: String,
        currency: String,
        at: Origin,
    },
}

/// A host's `control listen="IP:PORT" [operators="PATH" certificate="PATH"
/// key="PATH"]`: an address serving the control plane; anything but loopback only
/// with operator mutual TLS. Relative paths are resolved against the directory of the
/// topology file naming them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlListen {
    pub listen: SocketAddr,
    /// The operator mutual TLS of the line, when it names one: required off loopback.
    pub operators: Option<Operators>,
}

/// The three PEM files of a control line served with operator mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operators {
    /// The certificate authority (or authorities) operators' certificates chain to.
    pub ca: PathBuf,
    /// The certificate chain the page presents to operators' browsers; without it, the
    /// host's participant certificate of each membership (by server name).
    pub certificate: Option<PathBuf>,
    /// Its private key (PKCS#8, SEC1 or PKCS#1 PEM), a file of mode 600; given with
    /// `certificate` only.
    pub key: Option<PathBuf>,
}

/// A host's `storage generation=N [from="PATH"] [authority="M"]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageGeneration {
    pub generation: u64,
    /// An absolute path: the copy of the host's store a replacement puts in place.
    pub from: Option<PathBuf>,
    /// `authority="M"`: the store's generation is the claim `store:HOST` at the
    /// authority of membership M, taken at every start before the host serves
    /// (docs/transfer.md, "Fenced at the authority").
    pub authority: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    pub name: String,
    pub listen: SocketAddr,
    /// `dir=PATH`; `None` means `<state>/hosts/NAME`.
    pub dir: Option<PathBuf>,
    pub memberships: Vec<String>,
    /// `member M leave=#true`: memberships the host leaves, explicitly — not among
    /// `memberships`, so no route, `serve` or `capacity` of M may name it; the plan's
    /// `- membership M @ H (leave)` waits until the host's obligations there close.
    pub leaving: Vec<String>,
    pub profiles: Vec<Profile>,
    /// `keys generation=N`: the signing-key generation the host should hold.
    pub key_generation: Option<u32>,
    /// `keys mail-generation=N`: the mail-key generation the host should hold.
    pub mail_key_generation: Option<u32>,
    /// `keys tls-generation=N`: the TLS-key generation the host should hold.
    pub tls_key_generation: Option<u32>,
    /// `custody locked=#true`: the host's signing and mail keys are encrypted at rest
    /// under a passphrase only its operator holds (`gridctl custody lock`); the plan
    /// asks for it until they are.
    pub custody_locked: bool,
    /// `storage generation=N [from="PATH"]`: the storage generation the installation
    /// should be at; one above it plans a replacement of its store by the copy at
    /// `from` (docs/transfer.md, "Storage replacement").
    pub storage: Option<StorageGeneration>,
    /// `capacity …`: delivery capacity of the routes this host publishes.
    pub capacity: DeliveryCapacity,
    /// `capacity membership=M …`: the capacity of the routes of M this host publishes,
    /// its own pool (a value it leaves unset is the host's `capacity`, then the
    /// engine's default).
    pub membership_capacity: std::collections::BTreeMap<String, DeliveryCapacity>,
    /// `metrics="IP:PORT"`: where gridd serves Prometheus text; loopback only.
    pub metrics: Option<SocketAddr>,
    /// `control listen="IP:PORT" [operators="PATH" …]` lines: where the host serves the
    /// operator control plane (profile `control`, docs/control-plane.md).
    pub control: Vec<ControlListen>,
    /// `retain hot-days=N [archive-days=M]`: unset values are the engine's defaults.
    pub retain: Retention,
    /// `archive "file"|"s3://…"|"dynamodb://…"`: where the host keeps what it archives.
    pub archive: crate::storage::ArchiveTarget,
    /// The files name the host's own files for its archive's segments in so many words
    /// (`archive "file"`, or a table's `segments "file"`), not by leaving a line out: a
    /// move of the segments out of a bucket is made only when they say so.
    pub archive_files_named: bool,
    pub retired: bool,
    pub origin: Origin,
}

impl Host {
    /// The help of a refusal naming a membership the host is not in: add the `member`
    /// line — or, when the host leaves that membership, remove `what` that names it.
    pub fn not_member_help(&self, membership: &str, what: &str) -> String {
        if self.leaving.iter().any(|m| m == membership) {
            format!(
                "host `{}` leaves `{membership}` (`member {membership} leave=#true`): remove {what}; what it owes there is still delivered, and the leave waits for it",
                self.name
            )
        } else {
            format!(
                "add `member {membership}` to host `{}`, or remove {what}",
                self.name
            )
        }
    }
}

/// `retain [hot-days=N] [archive-days=M]`: answers older than `hot-days` move to the
/// host's archive; with `archive-days`, a re-sent id older than it is refused as
/// expired (without it the archive answers for ever).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    pub hot_days: Option<u32>,
    pub archive_days: Option<u32>,
}

/// `capacity [ordered-per-destination=N] [ordered-per-host=N] [latest-per-destination=N]
/// [latest-per-host=N]` — separate for the two classes; unset means the engine's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryCapacity {
    pub ordered_per_destination: Option<u64>,
    pub ordered_per_host: Option<u64>,
    pub latest_per_destination: Option<u64>,
    pub latest_per_host: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    pub host: String,
    /// The declared ceiling; admission uses [`Model::ceiling`].
    pub declared_ceiling: Option<u32>,
    pub scalar: bool,
    pub retired: bool,
    /// Inputs and cells in declaration order: a range `a:b` covers this order.
    pub items: Vec<Item>,
    pub outputs: Vec<Output>,
    /// `serve M`: the memberships whose routes may feed or carry this model (explicit
    /// admission; none named: its host's one membership, when it has exactly one).
    pub serves: Vec<String>,
    /// Counted operations of all formulas (see `docs/models.md`).
    pub operations: u64,
    pub origin: Origin,
}

impl Model {
    /// The operation ceiling admission applies.
    pub fn ceiling(&self) -> u32 {
        self.declared_ceiling
            .unwrap_or(crate::limits::MODEL_OPERATIONS_CEILING_DEFAULT)
    }

    pub fn item(&self, name: &str) -> Option<&Item> {
        self.items.iter().find(|i| i.name() == name)
    }

    pub fn inputs(&self) -> impl Iterator<Item = &Input> {
        self.items.iter().filter_map(|i| match i {
            Item::Input(input) => Some(input),
            Item::Cell(_) | Item::Matrix(_) => None,
        })
    }

    pub fn cells(&self) -> impl Iterator<Item = &Cell> {
        self.items.iter().filter_map(|i| match i {
            Item::Cell(cell) => Some(cell),
            Item::Input(_) | Item::Matrix(_) => None,
        })
    }

    pub fn matrices(&self) -> impl Iterator<Item = &MatrixItem> {
        self.items.iter().filter_map(|i| match i {
            Item::Matrix(matrix) => Some(matrix),
            Item::Input(_) | Item::Cell(_) => None,
        })
    }
}

/// An input, a formula cell or a matrix; they share one declaration order and one
/// namespace.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Input(Input),
    Cell(Cell),
    Matrix(MatrixItem),
}

impl Item {
    pub fn name(&self) -> &str {
        match self {
            Item::Input(input) => &input.name,
            Item::Cell(cell) => &cell.name,
            Item::Matrix(matrix) => &matrix.name,
        }
    }
}

/// `matrix NAME rows=R cols=C from="mapping:M"`: a matrix of the model, read by
/// formulas as `NAME[row, col]`; its values come from mapping M (docs/grdx.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatrixItem {
    pub name: String,
    pub rows: u32,
    pub cols: u32,
    /// The mapping its values come from.
    pub mapping: String,
    /// How a staged version enters the model (`apply=`).
    pub apply: MatrixApply,
    /// `version=N`: the staged version the files pin (applied by a plan transition;
    /// not part of the model's definition, like `retired`).
    pub version: Option<u64>,
}

/// `apply="explicit"` (the default: `gridctl model apply-matrix`, or the version the
/// files pin) or `apply="on-receipt"` (the host applies each newest version staged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatrixApply {
    #[default]
    Explicit,
    OnReceipt,
}

impl MatrixApply {
    pub fn name(self) -> &'static str {
        match self {
            MatrixApply::Explicit => "explicit",
            MatrixApply::OnReceipt => "on-receipt",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub name: String,
    /// The value before any batch sets one; without it the input reads `#N/A`.
    pub default: Option<f64>,
    pub from: Option<InputSource>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputSource {
    /// `from="tag:T"`
    Tag(String),
    /// `from="route:R"`
    Route(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub name: String,
    /// The formula text as written.
    pub formula: String,
    pub expr: Expr,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub cell: String,
    pub route: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteClass {
    Ordered,
    Latest,
}

impl RouteClass {
    pub fn name(self) -> &'static str {
        match self {
            RouteClass::Ordered => "ordered",
            RouteClass::Latest => "latest",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub name: String,
    pub membership: String,
    pub class: RouteClass,
    pub encrypted: bool,
    pub publisher: String,
    pub destinations: Vec<Destination>,
    pub retired: bool,
    pub origin: Origin,
}

/// The encoding a mapping carries (`format=`); GRDX dense is the one there is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixFormat {
    Grdx,
}

impl MatrixFormat {
    pub fn name(self) -> &'static str {
        match self {
            MatrixFormat::Grdx => "grdx",
        }
    }
}

/// A `mapping`: a publisher's matrices of one geometry to its destinations — its own
/// kind beside routes (Ordered, encrypted always, signed receipts), never carrying a
/// scalar (issue 34, docs/grdx.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    pub name: String,
    pub membership: String,
    pub format: MatrixFormat,
    pub rows: u32,
    pub cols: u32,
    pub publisher: String,
    pub destinations: Vec<Destination>,
    pub retired: bool,
    pub origin: Origin,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Destination {
    pub host: String,
    pub retired: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub name: String,
    /// The receiving host that signs and honours the grant.
    pub issuer: String,
    pub caller: String,
    pub units: u64,
    /// The mailbox host through which the caller may reach the issuer.
    pub mailbox: Option<String>,
    /// `membership=M`: the grant serves only runs that reach the issuer through
    /// membership `M` (every party a member of it); none: through any membership the
    /// parties share.
    pub membership: Option<String>,
    pub retired: bool,
    pub origin: Origin,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Mission {
    pub name: String,
    pub host: String,
    pub units: u64,
    /// RFC 3339 timestamp, validated for shape.
    pub deadline: String,
    pub successor: String,
    /// The host that signs the allocation, the settlement and a never-issued closure
    /// (`issuer=`; by default the successor).
    pub issuer: String,
    /// `returned=#true`: the mission is returned (its consumption record sent, then
    /// settled). Removing the node instead leaves it unmanaged.
    pub returned: bool,
    pub origin: Origin,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tag {
    pub name: String,
    pub host: String,
    pub source: TagSource,
    /// `retired=#true`: the tag is removed from its host, releasing what it holds at
    /// its device (a confirmed COV subscription is cancelled). Removing the node from
    /// the file instead leaves the tag unmanaged.
    pub retired: bool,
    pub origin: Origin,
}

/// Where a tag's observations come from (SPEC C9); exactly one per tag.
#[derive(Debug, Clone, PartialEq)]
pub enum TagSource {
    /// A Modbus TCP register polled every `interval_ms` (docs/sources.md): value =
    /// raw × `scale` + `offset`, both finite.
    Modbus {
        /// `HOST:PORT` of the device in its one spelling (`endpoint::DeviceAddress`
        /// reads it); the device hop is unauthenticated (docs/sources.md).
        address: String,
        unit: u8,
        register: ModbusRegister,
        register_address: u16,
        value_type: ModbusType,
        /// Which register of a two-register value comes first (u32, i32, f32).
        word_order: WordOrder,
        scale: f64,
        offset: f64,
        interval_ms: u32,
    },
    /// One node of an OPC UA server, read through a subscription with one monitored
    /// item (docs/sources.md, "OPC UA").
    OpcUa {
        /// `opc.tcp://HOST:PORT[/PATH]`.
        endpoint: String,
        /// The node id in its text form (`ns=2;s=Boiler.Pressure`, `i=2258`, …).
        node: String,
        /// Always written: `none` only for a loopback endpoint.
        security: OpcUaSecurity,
        /// The security policy (`Basic256Sha256`, …); `None` with `security=none`.
        policy: Option<String>,
        /// The subscription's requested publishing interval.
        publishing_ms: u32,
        /// `sign`/`sign-and-encrypt`: a DER or PEM file of the server certificate the
        /// host trusts (relative paths are the host directory's).
        server_certificate: Option<String>,
    },
    /// One metric of a Sparkplug B edge node (or one of its devices) through an MQTT
    /// broker. `group`, `node` and `device` are single MQTT topic levels (not empty, no
    /// `/ + #`); `metric` is not empty.
    Sparkplug {
        /// `mqtt://HOST:PORT` (a loopback broker only) or `mqtts://HOST:PORT` (with `ca`,
        /// `membership` or both), the port written out (`endpoint::Broker` reads it).
        broker: String,
        group: String,
        node: String,
        device: Option<String>,
        metric: String,
        /// The MQTT client id (printable ASCII, no spaces, at most
        /// `SPARKPLUG_CLIENT_ID_LENGTH_MAX` bytes); `grid-<host>-<tag>` when none is given.
        client_id: Option<String>,
        /// `mqtts://` only: a PEM file of the CA that certifies the broker.
        ca: Option<String>,
        /// `mqtts://` only: present this membership's certificate of the host to the
        /// broker (and trust the membership's authority when no `ca` is named).
        membership: Option<String>,
    },
    /// One property of one object of a BACnet/IP device, polled with ReadProperty or
    /// followed through a confirmed COV subscription (docs/sources.md, "BACnet/IP").
    Bacnet {
        /// `HOST:PORT` of the device (UDP).
        address: String,
        device: u32,
        /// `TYPE:INSTANCE` in its one spelling (`analog-input:3`).
        object: String,
        /// `present-value`.
        property: String,
        /// A confirmed COV subscription instead of polling.
        cov: bool,
        /// The COV subscription's lifetime, renewed before it ends; `None` without `cov`.
        lifetime_s: Option<u32>,
        /// The polling interval (without `cov`).
        interval_ms: u32,
    },
    /// One SPN of one PGN received passively (never transmitted) on a CAN bus
    /// (docs/sources.md, "CAN/J1939").
    J1939 {
        input: J1939Input,
        pgn: u32,
        spn: u32,
        /// Only frames from this source address.
        source_address: Option<u8>,
    },
    /// Deterministic observations generated at the tag's host (docs/sources.md):
    /// `period_s >= 1`, `min < max`, both finite, `interval_ms` within
    /// `SIMULATE_INTERVAL_MS_MIN..=SIMULATE_INTERVAL_MS_MAX`.
    Simulate {
        wave: Wave,
        period_s: u32,
        min: f64,
        max: f64,
        seed: u64,
        interval_ms: u32,
    },
}

/// How an OPC UA tag secures its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpcUaSecurity {
    None,
    Sign,
    SignAndEncrypt,
}

impl OpcUaSecurity {
    pub const ALL: [OpcUaSecurity; 3] = [
        OpcUaSecurity::None,
        OpcUaSecurity::Sign,
        OpcUaSecurity::SignAndEncrypt,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpcUaSecurity::None => "none",
            OpcUaSecurity::Sign => "sign",
            OpcUaSecurity::SignAndEncrypt => "sign-and-encrypt",
        }
    }

    pub fn from_name(name: &str) -> Option<OpcUaSecurity> {
        OpcUaSecurity::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Where a J1939 tag's frames come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum J1939Input {
    /// `log=PATH`: a candump log replayed at its recorded pace (relative paths are the
    /// host directory's).
    Log(String),
    /// `interface=NAME`: a SocketCAN interface; refused where the kernel has no CAN.
    Interface(String),
}

/// The shape of a simulated tag's signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wave {
    Sine,
    Triangle,
    Square,
    Sawtooth,
}

impl Wave {
    pub const ALL: [Wave; 4] = [Wave::Sine, Wave::Triangle, Wave::Square, Wave::Sawtooth];

    pub fn name(self) -> &'static str {
        match self {
            Wave::Sine => "sine",
            Wave::Triangle => "triangle",
            Wave::Square => "square",
            Wave::Sawtooth => "sawtooth",
        }
    }

    pub fn from_name(name: &str) -> Option<Wave> {
        Wave::ALL.into_iter().find(|w| w.name() == name)
    }
}

impl TagSource {
    pub fn kind(&self) -> &'static str {
        match self {
            TagSource::Modbus { .. } => "modbus",
            TagSource::OpcUa { .. } => "opcua",
            TagSource::Sparkplug { .. } => "sparkplug",
            TagSource::Bacnet { .. } => "bacnet",
            TagSource::J1939 { .. } => "j1939",
            TagSource::Simulate { .. } => "simulate",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModbusRegister {
    Holding,
    Input,
    Coil,
    Discrete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModbusType {
    U16,
    I16,
    U32,
    I32,
    F32,
    /// A coil or discrete input: 0 or 1.
    Bool,
}

impl ModbusType {
    pub const ALL: [ModbusType; 6] = [
        ModbusType::U16,
        ModbusType::I16,
        ModbusType::U32,
        ModbusType::I32,
        ModbusType::F32,
        ModbusType::Bool,
    ];

    pub fn from_name(name: &str) -> Option<ModbusType> {
        ModbusType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// How many 16-bit registers one value takes (a bit for `Bool`).
    pub fn registers(self) -> u16 {
        match self {
            ModbusType::U16 | ModbusType::I16 | ModbusType::Bool => 1,
            ModbusType::U32 | ModbusType::I32 | ModbusType::F32 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ModbusType::U16 => "u16",
            ModbusType::I16 => "i16",
            ModbusType::U32 => "u32",
            ModbusType::I32 => "i32",
            ModbusType::F32 => "f32",
            ModbusType::Bool => "bool",
        }
    }
}

impl ModbusRegister {
    pub const ALL: [ModbusRegister; 4] = [
        ModbusRegister::Holding,
        ModbusRegister::Input,
        ModbusRegister::Coil,
        ModbusRegister::Discrete,
    ];

    pub fn from_name(name: &str) -> Option<ModbusRegister> {
        ModbusRegister::ALL.into_iter().find(|r| r.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            ModbusRegister::Holding => "holding",
            ModbusRegister::Input => "input",
            ModbusRegister::Coil => "coil",
            ModbusRegister::Discrete => "discrete",
        }
    }

    /// Coils and discrete inputs hold bits; holding and input registers hold words.
    pub fn holds_bits(self) -> bool {
        matches!(self, ModbusRegister::Coil | ModbusRegister::Discrete)
    }
}

/// The order of the two registers of a 32-bit Modbus value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WordOrder {
    /// The high word at the lower address (the Modbus convention).
    Big,
    /// The low word at the lower address.
    Little,
}

impl WordOrder {
    pub const ALL: [WordOrder; 2] = [WordOrder::Big, WordOrder::Little];

    pub fn from_name(name: &str) -> Option<WordOrder> {
        WordOrder::ALL.into_iter().find(|w| w.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            WordOrder::Big => "big",
            WordOrder::Little => "little",
        }
    }
}

/// A cross-domain export (SPEC C10): `gateway` passes values of route `from` (in one
/// membership) onto route `to` (in another).
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    pub name: String,
    pub gateway: String,
    pub from: String,
    pub to: String,
    /// `disclosure issuer=H`: the publisher of `from`, who signs the disclosure.
    pub issuer: String,
    /// `expires "RFC 3339"`: no value crosses after it.
    pub expires: Option<String>,
    /// `retired=#true`: nothing crosses any more; the disclosure is withdrawn.
    pub retired: bool,
    pub origin: Origin,
}

/// A ledger of integer minor units (SPEC C6, docs/ledger.md) kept at `host`, which
/// selects the `ledger` profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Ledger {
    pub name: String,
    pub host: String,
    /// In declaration order; names unique within the ledger.
    pub accounts: Vec<Account>,
    pub origin: Origin,
}

/// `account NAME currency="CUR" [owner=HOST] [debits-must-not-exceed-credits=#true]
/// [credits-must-not-exceed-debits=#true] [retired=#true]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    /// 3 to 12 uppercase ASCII letters and digits (`LEDGER_CURRENCY_LENGTH_MIN`/`MAX`).
    pub currency: String,
    /// The participant whose wallet observes the account.
    pub owner: Option<String>,
    pub debits_must_not_exceed_credits: bool,
    pub credits_must_not_exceed_debits: bool,
    /// Closed to new transfers; never deleted.
    pub retired: bool,
}

/// A currency code is `LEDGER_CURRENCY_LENGTH_MIN` to `LEDGER_CURRENCY_LENGTH_MAX` (3 to
/// 12) uppercase ASCII letters and digits, starting with a letter (`EUR`, `USD`, `KWH`,
/// `TOKEN1`). The engine checks it again at the owner.
pub fn is_currency(code: &str) -> bool {
    use crate::limits::{LEDGER_CURRENCY_LENGTH_MAX, LEDGER_CURRENCY_LENGTH_MIN};
    (LEDGER_CURRENCY_LENGTH_MIN..=LEDGER_CURRENCY_LENGTH_MAX).contains(&code.len())
        && code.starts_with(|c: char| c.is_ascii_uppercase())
        && code
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}
