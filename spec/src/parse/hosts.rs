//! `host` and `membership` nodes.

use super::*;

impl FileReader<'_> {
    pub(super) fn host(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "host");
        let listen = n
            .string_prop(self, "listen", true)
            .and_then(|(text, span)| match text.parse::<SocketAddr>() {
                Ok(addr) => Some((addr, span)),
                Err(_) => {
                    self.error(
                        span,
                        format!("`{text}` is not a listen address"),
                        "expected IP:PORT",
                        "for example listen=\"127.0.0.1:7401\"",
                    );
                    None
                }
            });
        let metrics = n
            .string_prop(self, "metrics", false)
            .and_then(|(text, span)| match text.parse::<SocketAddr>() {
                Ok(addr) if addr.ip().is_loopback() => Some(addr),
                Ok(_) => {
                    self.error(
                        span,
                        format!("`metrics` address `{text}` is not a loopback address"),
                        "not loopback",
                        "metrics are served on plain HTTP to this machine only: use 127.0.0.1:PORT or [::1]:PORT",
                    );
                    None
                }
                Err(_) => {
                    self.error(
                        span,
                        format!("`{text}` is not a `metrics` address"),
                        "expected IP:PORT",
                        "for example metrics=\"127.0.0.1:9401\"",
                    );
                    None
                }
            });
        let dir = n.string_prop(self, "dir", false);
        if let Some((dir, span)) = &dir
            && dir.is_empty()
        {
            self.error(
                *span,
                "`dir` is empty",
                "empty path",
                "omit `dir` to use <state>/hosts/NAME",
            );
        } else if let Some((dir, span)) = &dir
            && !dir.starts_with('/')
        {
            // A relative one would be read against whichever directory gridctl runs
            // in, and the state directory's link to it against its own.
            self.error(
                *span,
                format!(
                    "`dir` is `{}`: an installation's directory is an absolute path",
                    crate::diagnostic::quoted(dir)
                ),
                "not absolute",
                "name it from the root (dir=\"/srv/grid/NAME\"), or omit `dir` to use <state>/hosts/NAME",
            );
        }
        let retired = n.bool_prop(self, "retired").unwrap_or(false);
        let mut memberships: Vec<String> = Vec::new();
        let mut leaving: Vec<String> = Vec::new();
        let mut leave_spans: Vec<(String, SourceSpan)> = Vec::new();
        let mut profiles: Vec<Profile> = Vec::new();
        let mut key_generation = None;
        let mut mail_key_generation = None;
        let mut tls_key_generation = None;
        let mut custody_locked = false;
        let mut custody_seen = false;
        let mut storage = None;
        let mut storage_seen = false;
        let mut storage_authority_span: Option<(String, SourceSpan)> = None;
        let mut capacity = crate::topology::DeliveryCapacity::default();
        let mut capacity_seen = false;
        let mut membership_capacity = std::collections::BTreeMap::new();
        let mut capacity_spans: Vec<(String, SourceSpan)> = Vec::new();
        let mut retain = crate::topology::Retention::default();
        let mut retain_seen = false;
        let mut archive = crate::storage::ArchiveTarget::File;
        let mut archive_files_named = false;
        let mut archive_seen = false;
        let mut profiles_seen = false;
        let mut control: Vec<(ControlListen, SourceSpan)> = Vec::new();
        let mut control_seen = 0;
        let host_name = name.as_ref().map_or("?", |(n, _)| n.as_str()).to_owned();
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            match child.name().value() {
                "member" => {
                    let context = name
                        .as_ref()
                        .map(|(host, _)| format!("host `{host}` member"));
                    if c.bool_prop(self, "leave").unwrap_or(false) {
                        if let Some(span) =
                            self.membership_once(&mut c, &mut leaving, ("member", context))
                        {
                            leave_spans.push((leaving.last().cloned().unwrap_or_default(), span));
                        }
                    } else {
                        self.membership_once(&mut c, &mut memberships, ("member", context));
                    }
                }
                "profiles" => {
                    if profiles_seen {
                        self.error(
                            child.name().span(),
                            "`profiles` is given twice",
                            "second list",
                            "list every profile on one `profiles` line",
                        );
                    }
                    profiles_seen = true;
                    let mut archive_wallet = None;
                    for (value, span) in c.string_args(self, "profile") {
                        if value == Profile::ArchiveWallet.name() {
                            archive_wallet = Some(span);
                        }
                        match Profile::from_name(&value) {
                            Some(p) if profiles.contains(&p) => self.error(
                                span,
                                format!("profile `{value}` is listed twice"),
                                "repeated",
                                "",
                            ),
                            Some(p) => {
                                let host = name.as_ref().map_or("", |(n, _)| n.as_str());
                                let site = (self.file.clone(), span, p, host.to_owned());
                                self.parsed.profile_spans.push(site);
                                profiles.push(p);
                            }
                            None => self.error(
                                span,
                                format!("unknown profile `{value}`"),
                                "not a profile",
                                &format!(
                                    "profiles are: {}",
                                    Profile::ALL.map(Profile::name).join(", ")
                                ),
                            ),
                        }
                    }
                    if let Some(span) = archive_wallet
                        && !profiles.contains(&Profile::Processes)
                    {
                        let host = name.as_ref().map_or("?", |(n, _)| n.as_str()).to_owned();
                        self.error(
                            span,
                            format!(
                                "host `{host}` selects `archive-wallet`, which serves its wallet's Processes and needs the `processes` profile"
                            ),
                            "needs `processes`",
                            &format!("add `processes` to the `profiles` line of host `{host}`"),
                        );
                    }
                }
                "keys" => {
                    // Each key rotates on its own generation; an unsaid one is 1.
                    if let Some((generation, _)) =
                        c.int_prop(self, "generation", false, 1, u32::MAX as i128)
                    {
                        key_generation = Some(generation as u32);
                    }
                    if let Some((generation, _)) =
                        c.int_prop(self, "mail-generation", false, 1, u32::MAX as i128)
                    {
                        mail_key_generation = Some(generation as u32);
                    }
                    if let Some((generation, _)) =
                        c.int_prop(self, "tls-generation", false, 1, u32::MAX as i128)
                    {
                        tls_key_generation = Some(generation as u32);
                    }
                }
                "custody" => {
                    if std::mem::replace(&mut custody_seen, true) {
                        self.error(
                            child.name().span(),
                            "`custody` is given twice",
                            "second",
                            "one `custody locked=#true` per host",
                        );
                    }
                    custody_locked = c.bool_prop(self, "locked").unwrap_or(false);
                }
                "storage" => {
                    if std::mem::replace(&mut storage_seen, true) {
                        self.error(
                            child.name().span(),
                            "`storage` is given twice",
                            "second",
                            "one `storage generation=N [from=\"PATH\"] [authority=\"M\"]` per host",
                        );
                    }
                    let max = crate::limits::STORAGE_GENERATION_MAX as i128;
                    let generation = c.limited_int_prop(
                        self,
                        "generation",
                        true,
                        (1, "1"),
                        (max, "STORAGE_GENERATION_MAX"),
                    );
                    let from = c.string_prop(self, "from", false);
                    if let Some((path, span)) = &from
                        && !path.starts_with('/')
                    {
                        self.error(
                            *span,
                            format!(
                                "`from` is `{}`: the copy of a store to put in place is named by an absolute path",
                                crate::diagnostic::quoted(path)
                            ),
                            "not absolute",
                            "name the copy from the root: from=\"/mnt/…\"",
                        );
                    }
                    let authority = c.string_prop(self, "authority", false);
                    if let Some((m, span)) = &authority {
                        storage_authority_span = Some((m.clone(), *span));
                    }
                    if let Some((generation, _)) = generation {
                        storage = Some(crate::topology::StorageGeneration {
                            generation: generation as u64,
                            from: from.map(|(p, _)| PathBuf::from(p)),
                            authority: authority.map(|(m, _)| m),
                        });
                    }
                }
                "capacity" => {
                    let membership = c.string_prop(self, "membership", false);
                    let max = crate::limits::DELIVERY_CAPACITY_MAX as i128;
                    let mut read =
                        |key: &str| c.int_prop(self, key, false, 1, max).map(|(n, _)| n as u64);
                    let read = crate::topology::DeliveryCapacity {
                        ordered_per_destination: read("ordered-per-destination"),
                        ordered_per_host: read("ordered-per-host"),
                        latest_per_destination: read("latest-per-destination"),
                        latest_per_host: read("latest-per-host"),
                    };
                    let repeated = match &membership {
                        Some((m, _)) => membership_capacity.insert(m.clone(), read).is_some(),
                        None => std::mem::replace(&mut capacity_seen, true),
                    };
                    if repeated {
                        let scope = membership
                            .as_ref()
                            .map_or(String::new(), |(m, _)| format!(" membership={m}"));
                        self.error(
                            child.name().span(),
                            format!("`capacity{scope}` is given twice"),
                            "second",
                            "one `capacity` line for the host, and at most one per membership (`capacity membership=M …`)",
                        );
                    }
                    match membership {
                        Some((m, span)) => capacity_spans.push((m, span)),
                        None => capacity = read,
                    }
                }
                "retain" => {
                    if retain_seen {
                        self.error(
                            child.name().span(),
                            "`retain` is given twice",
                            "second",
                            "one `retain hot-days=N [archive-days=M]` per host",
                        );
                    }
                    retain_seen = true;
                    retain = self.retain(&mut c);
                }
                "archive" => {
                    if archive_seen {
                        self.error(
                            child.name().span(),
                            "`archive` is given twice",
                            "second",
                            "one `archive \"file\"` or `archive \"s3://BUCKET/PREFIX\" endpoint=… credentials=…` per host",
                        );
                    }
                    archive_seen = true;
                    archive = self.archive(&mut c, &mut archive_files_named);
                }
                "control" => {
                    control_seen += 1;
                    if let Some(line) = self.control_listen(&mut c, &host_name) {
                        control.push(line);
                    }
                }
                other => {
                    c.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown child `{other}` of host"),
                        "not a host setting",
                        "a host holds `member M`, `profiles P…`, `keys generation=N`, `custody locked=#true`, `storage generation=N`, `capacity …`, `retain …`, `archive …` and `control listen=…`",
                    )
                }
            }
            if child.name().value() != "archive" {
                c.no_children(self);
            }
            c.finish(self);
        }
        n.finish(self);
        if let Some((host, span)) = &name {
            let taken = [listen.map(|(l, _)| l), metrics];
            self.control_lines((host, *span), &profiles, taken, (&control, control_seen));
        }
        for (membership, span) in leave_spans {
            if memberships.contains(&membership) {
                self.error(
                    span,
                    format!("`member {membership}` is given twice, once with `leave=#true`"),
                    "repeated",
                    "a host either is a member or leaves: keep one line",
                );
            }
        }
        for (membership, span) in capacity_spans {
            if !memberships.contains(&membership) {
                let host = name.as_ref().map_or("?", |(n, _)| n.as_str()).to_owned();
                self.error(
                    span,
                    format!(
                        "`capacity membership={membership}`: host `{host}` is not a member of `{membership}`"
                    ),
                    "not a membership of the host",
                    &if leaving.contains(&membership) {
                        format!("host `{host}` leaves `{membership}` (`member {membership} leave=#true`): remove this line")
                    } else {
                        format!("add `member {membership}` to host `{host}`, or remove this line")
                    },
                );
            }
        }
        if let Some((membership, span)) = &storage_authority_span
            && !memberships.contains(membership)
        {
            let host = name.as_ref().map_or("?", |(n, _)| n.as_str()).to_owned();
            self.error(
                *span,
                format!(
                    "`storage authority={membership}`: host `{host}` is not a member of `{membership}`"
                ),
                "not a membership of the host",
                &format!(
                    "the claim `store:{host}` is held at the authority of a membership the host is in: add `member {membership}` or name another"
                ),
            );
        }
        let (Some((name, name_span)), Some((listen, listen_span))) = (name, listen) else {
            return;
        };
        if let Some((membership, span)) = storage_authority_span {
            self.parsed.storage_authority_spans.push((
                self.file.clone(),
                span,
                name.clone(),
                membership,
            ));
        }
        self.parsed
            .host_spans
            .push((self.file.clone(), listen_span, dir.as_ref().map(|d| d.1)));
        let origin = self.origin(name_span);
        self.parsed.topology.hosts.push(Host {
            name,
            listen,
            dir: dir.map(|(d, _)| PathBuf::from(d)),
            memberships,
            leaving,
            profiles,
            key_generation,
            mail_key_generation,
            tls_key_generation,
            custody_locked,
            storage,
            capacity,
            membership_capacity,
            metrics,
            control: control.into_iter().map(|(c, _)| c).collect(),
            retain,
            archive,
            archive_files_named,
            retired,
            origin,
        });
    }

    /// `retain [hot-days=N] [archive-days=M]`: each within its named limits, and the
    /// archive never shorter than the hot window it follows.
    fn retain(&mut self, c: &mut NodeReader) -> crate::topology::Retention {
        use crate::limits::{RETAIN_ARCHIVE_DAYS_MAX, RETAIN_DAYS_MIN, RETAIN_HOT_DAYS_MAX};
        let min = (RETAIN_DAYS_MIN as i128, "RETAIN_DAYS_MIN");
        let hot = c.limited_int_prop(
            self,
            "hot-days",
            false,
            min,
            (RETAIN_HOT_DAYS_MAX as i128, "RETAIN_HOT_DAYS_MAX"),
        );
        let archive = c.limited_int_prop(
            self,
            "archive-days",
            false,
            min,
            (RETAIN_ARCHIVE_DAYS_MAX as i128, "RETAIN_ARCHIVE_DAYS_MAX"),
        );
        let hot_days = hot.map(|(n, _)| n as u32);
        if let Some((archive_days, span)) = archive {
            let hot = hot_days.unwrap_or(crate::limits::RETAIN_HOT_DAYS_DEFAULT);
            if (archive_days as u32) < hot {
                self.error(
                    span,
                    format!(
                        "`archive-days` ({archive_days}) is shorter than the hot window ({hot} days)"
                    ),
                    "shorter than hot-days",
                    "answers reach the archive after `hot-days`: give `archive-days` at least as many days, or omit it to keep archived answers for ever",
                );
            }
        }
        crate::topology::Retention {
            hot_days,
            archive_days: archive.map(|(n, _)| n as u32),
        }
    }

    /// `archive "file"`, `archive "s3://BUCKET/PREFIX" endpoint=… [region=…]
    /// credentials=…` or `archive "dynamodb://TABLE" endpoint=… [region=…] credentials=…
    /// [{ segments "s3://BUCKET/PREFIX" endpoint=… credentials=… }]`: the addresses,
    /// endpoints, regions and credentials paths checked here; the credentials files
    /// themselves are read where the host runs.
    /// `files_named`: whether the segments are named to be in the host's own files in
    /// so many words.
    fn archive(
        &mut self,
        c: &mut NodeReader,
        files_named: &mut bool,
    ) -> crate::storage::ArchiveTarget {
        use crate::storage::ArchiveTarget;
        let mut target = self.blob_store(c, "archive");
        *files_named = target == ArchiveTarget::File;
        let mut segments = None;
        for child in c.children(self) {
            let mut g = NodeReader::new(child);
            match child.name().value() {
                "segments" => {
                    if segments.is_some() {
                        self.error(
                            child.name().span(),
                            "`segments` is given twice",
                            "second",
                            "one segment store per archive",
                        );
                    }
                    segments = Some((self.blob_store(&mut g, "segments"), child.name().span()));
                }
                other => {
                    g.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown child `{other}` of archive"),
                        "not an archive setting",
                        "an archive indexed in DynamoDB holds `segments \"file\"` or `segments \"s3://BUCKET/PREFIX\" endpoint=… credentials=…`",
                    )
                }
            }
            g.no_children(self);
            g.finish(self);
        }
        match (&mut target, segments) {
            (_, None) => {}
            (ArchiveTarget::DynamoDb(d), Some((store, _))) => {
                *files_named = store == ArchiveTarget::File;
                d.segments = match store {
                    ArchiveTarget::S3(s3) => Some(s3),
                    _ => None,
                }
            }
            (other, Some((_, span))) => self.error(
                span,
                format!(
                    "`segments` belongs to an archive indexed in DynamoDB, not to `archive \"{}\"`",
                    other.url()
                ),
                "not for this archive",
                "an s3:// archive keeps its segments in its bucket, `archive \"file\"` in DIR/archive",
            ),
        }
        target
    }

    /// `WHAT "file"` or `WHAT "s3://BUCKET/PREFIX" endpoint=… [region=…] credentials=…`
    /// where `WHAT` is `archive` (a host's) or `snapshots` (an authority's).
    fn blob_store(&mut self, c: &mut NodeReader, what: &str) -> crate::storage::ArchiveTarget {
        use crate::storage::{ArchiveTarget, S3Archive, S3Location};
        let target = c.string_arg(self, 0, "address");
        let endpoint = c.string_prop(self, "endpoint", false);
        let region = c.string_prop(self, "region", false);
        let credentials = c.string_prop(self, "credentials", false);
        let ca = c.string_prop(self, "ca", false);
        let noun = match what {
            "segments" => "segment store",
            other => other,
        };
        let Some((url, url_span)) = target else {
            return ArchiveTarget::File;
        };
        if url == "file" {
            for (key, given) in [
                ("endpoint", &endpoint),
                ("region", &region),
                ("credentials", &credentials),
                ("ca", &ca),
            ] {
                if let Some((_, span)) = given {
                    self.error(
                        *span,
                        format!("`{key}` belongs to an s3:// {noun}, not to `{what} \"file\"`"),
                        "not for files",
                        &format!("remove it, or name the bucket: {what} \"s3://BUCKET/PREFIX\""),
                    );
                }
            }
            return ArchiveTarget::File;
        }
        let table = url.strip_prefix("dynamodb://").map(str::to_owned);
        if table.is_some() && what != "archive" {
            self.error(
                url_span,
                format!(
                    "{what} `{}`: {what} are objects, kept in files or on S3, not in DynamoDB",
                    crate::diagnostic::quoted(&url)
                ),
                "not an object store",
                &format!("use {what} \"file\" or {what} \"s3://BUCKET/PREFIX\"; nothing falls back to another store"),
            );
            return ArchiveTarget::File;
        }
        if let Some(Err(reason)) = table.as_deref().map(crate::storage::check_table) {
            self.error(
                url_span,
                format!("archive {reason}"),
                "not a table",
                "for example archive \"dynamodb://grid-answers\"",
            );
            return ArchiveTarget::File;
        }
        let location = match table {
            Some(_) => None,
            None => match S3Location::parse(&url) {
                Ok(location) => Some(location),
                Err(reason) => {
                    let help = if url.starts_with("s3://") {
                        "a bucket name is 3 to 63 lower-case letters, digits, `-` and `.`; a prefix is `/`-separated parts of letters, digits, `-`, `_` and `.`"
                    } else {
                        "\"file\", \"s3://BUCKET/PREFIX\" or (an archive) \"dynamodb://TABLE\""
                    };
                    self.error(url_span, format!("{what} {reason}"), "not a store", help);
                    return ArchiveTarget::File;
                }
            },
        };
        let scheme = if location.is_some() {
            "an s3://"
        } else {
            "a dynamodb://"
        };
        let mut missing = |key: &str, example: &str| {
            c.missing(
                self,
                format!("{scheme} {noun} needs `{key}`"),
                format!("add {key}=\"{example}\""),
            );
        };
        if endpoint.is_none() {
            missing("endpoint", "http://127.0.0.1:8333");
        }
        if credentials.is_none() {
            missing("credentials", "/etc/grid/s3.credentials");
        }
        let https = endpoint
            .as_ref()
            .is_some_and(|(text, _)| text.starts_with("https://"));
        let ca = ca.and_then(|(text, span)| {
            let wrong = if text.is_empty() {
                Some(("`ca` is empty", "empty path"))
            } else if endpoint.is_some() && !https {
                Some((
                    "`ca` belongs to an https:// endpoint: an http:// one is not encrypted, and no certificate is checked",
                    "not https",
                ))
            } else {
                None
            };
            match wrong {
                Some((message, label)) => {
                    self.error(
                        span,
                        message,
                        label,
                        "name a PEM file of the certificate authorities the server's certificate is checked against (instead of Mozilla's roots), with an https:// endpoint",
                    );
                    None
                }
                None => Some(PathBuf::from(text)),
            }
        });
        let endpoint =
            endpoint.and_then(|(text, span)| match crate::storage::check_endpoint(&text) {
                Ok(()) => Some(text.trim_end_matches('/').to_owned()),
                Err(reason) => {
                    self.error(
                        span,
                        format!(
                            "`endpoint` `{}` is not an S3 endpoint: {reason}",
                            crate::diagnostic::quoted(&text)
                        ),
                        "not http(s)://HOST:PORT",
                        "for example endpoint=\"http://127.0.0.1:8333\"",
                    );
                    None
                }
            });
        let region = match region {
            None => Some(crate::storage::S3_REGION_DEFAULT.to_owned()),
            Some((text, span)) => match crate::storage::check_region(&text) {
                Ok(()) => Some(text),
                Err(reason) => {
                    self.error(
                        span,
                        format!("`region` `{}`: {reason}", crate::diagnostic::quoted(&text)),
                        "not a region",
                        "omit it to sign for us-east-1",
                    );
                    None
                }
            },
        };
        let credentials = credentials.and_then(|(text, span)| {
            if text.is_empty() {
                self.error(
                    span,
                    "`credentials` is empty",
                    "empty path",
                    "name a private file in the AWS shared-credentials format ([default] with aws_access_key_id and aws_secret_access_key)",
                );
                return None;
            }
            Some(PathBuf::from(text))
        });
        match (endpoint, region, credentials, location) {
            (Some(endpoint), Some(region), Some(credentials), Some(location)) => {
                ArchiveTarget::S3(S3Archive {
                    location,
                    endpoint,
                    region,
                    credentials,
                    ca,
                })
            }
            (Some(endpoint), Some(region), Some(credentials), None) => {
                ArchiveTarget::DynamoDb(crate::storage::DynamoArchive {
                    table: url["dynamodb://".len()..].to_owned(),
                    endpoint,
                    region,
                    credentials,
                    ca,
                    segments: None,
                })
            }
            _ => ArchiveTarget::File,
        }
    }

    pub(super) fn membership(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "membership");
        let mut authority_voters = None;
        let mut snapshots = crate::storage::ArchiveTarget::File;
        let mut revoked: Vec<String> = Vec::new();
        let mut valid_days = None;
        let mut renew_before = None;
        let mut certificates_seen = false;
        let mut models_ceiling = None;
        let mut models_seen = false;
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            let authority = child.name().value() == "authority";
            match child.name().value() {
                "authority" => {
                    if authority_voters.is_some() {
                        self.error(
                            child.name().span(),
                            "`authority` is given twice",
                            "second",
                            "one authority per membership",
                        );
                    }
                    if let Some((voters, span)) = c.int_prop(
                        self,
                        "voters",
                        true,
                        1,
                        crate::limits::AUTHORITY_VOTERS_MAX as i128,
                    ) {
                        authority_voters = Some(voters as u32);
                        if let Some((m, _)) = &name {
                            self.parsed
                                .authority_spans
                                .insert(m.clone(), (self.file.clone(), span));
                        }
                    }
                    let mut seen = false;
                    for grandchild in c.children(self) {
                        let mut g = NodeReader::new(grandchild);
                        match grandchild.name().value() {
                            "snapshots" => {
                                if seen {
                                    self.error(
                                        grandchild.name().span(),
                                        "`snapshots` is given twice",
                                        "second",
                                        "one snapshot store per authority",
                                    );
                                }
                                seen = true;
                                snapshots = self.blob_store(&mut g, "snapshots");
                            }
                            other => {
                                g.skip_all();
                                self.error(
                                    grandchild.name().span(),
                                    format!("unknown child `{other}` of authority"),
                                    "not an authority setting",
                                    "an authority holds `snapshots \"file\"` or `snapshots \"s3://BUCKET/PREFIX\" endpoint=… credentials=…`",
                                )
                            }
                        }
                        g.no_children(self);
                        g.finish(self);
                    }
                }
                "revoke" => {
                    if let Some((participant, span)) = c.string_arg(self, 0, "participant") {
                        if revoked.contains(&participant) {
                            self.error(
                                span,
                                format!("`{participant}` is revoked twice"),
                                "repeated",
                                "",
                            );
                        } else {
                            revoked.push(participant);
                        }
                    }
                }
                "certificates" => {
                    if std::mem::replace(&mut certificates_seen, true) {
                        self.error(
                            child.name().span(),
                            "`certificates` is given twice",
                            "second",
                            "one certificate policy per membership",
                        );
                    }
                    valid_days = c
                        .limited_int_prop(
                            self,
                            "valid-days",
                            false,
                            (1, "1"),
                            (
                                crate::limits::CERTIFICATE_VALID_DAYS_MAX as i128,
                                "CERTIFICATE_VALID_DAYS_MAX",
                            ),
                        )
                        .map(|(n, _)| n as u32)
                        .or(valid_days);
                    renew_before = c
                        .limited_int_prop(
                            self,
                            "renew-before-days",
                            false,
                            (1, "1"),
                            (
                                crate::limits::CERTIFICATE_VALID_DAYS_MAX as i128,
                                "CERTIFICATE_VALID_DAYS_MAX",
                            ),
                        )
                        .map(|(n, span)| (n as u32, span))
                        .or(renew_before);
                }
                "models" => {
                    if std::mem::replace(&mut models_seen, true) {
                        self.error(
                            child.name().span(),
                            "`models` is given twice",
                            "second",
                            "one models ceiling per membership",
                        );
                    }
                    models_ceiling = c
                        .limited_int_prop(
                            self,
                            "ceiling",
                            true,
                            (1, "1"),
                            (
                                crate::limits::MODEL_OPERATIONS_CEILING_MAX as i128,
                                "MODEL_OPERATIONS_CEILING_MAX",
                            ),
                        )
                        .map(|(n, _)| n as u32)
                        .or(models_ceiling);
                }
                other => {
                    c.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown child `{other}` of membership"),
                        "not a membership setting",
                        "a membership holds `authority voters=N { snapshots … }`, `certificates valid-days=N renew-before-days=M`, `models ceiling=N` and `revoke PARTICIPANT`",
                    )
                }
            }
            if !authority {
                c.no_children(self);
            }
            c.finish(self);
        }
        n.finish(self);
        if let Some((name, span)) = name {
            let origin = self.origin(span);
            let certificate_valid_days =
                valid_days.unwrap_or(crate::limits::CERTIFICATE_VALID_DAYS_DEFAULT);
            let renew_before_days = match renew_before {
                Some((days, span)) => {
                    if days >= certificate_valid_days {
                        self.error(
                            span,
                            format!(
                                "`renew-before-days` {days} is not less than the certificates' validity of {certificate_valid_days} days: every certificate would be renewed as soon as it is issued"
                            ),
                            "not less than valid-days",
                            "renew some days before expiry, e.g. `certificates valid-days=365 renew-before-days=30`",
                        );
                    }
                    days
                }
                // The default, or less than a short validity.
                None => crate::limits::CERTIFICATE_RENEW_BEFORE_DAYS_DEFAULT
                    .min(certificate_valid_days / 2),
            };
            self.parsed.topology.memberships.push(Membership {
                name,
                authority_voters,
                snapshots,
                revoked,
                certificate_valid_days,
                renew_before_days,
                declared_models_ceiling: models_ceiling,
                origin,
            });
        }
    }
}
