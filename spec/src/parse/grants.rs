//! `grant`, `mission` and `export` nodes.

use super::*;

impl FileReader<'_> {
    pub(super) fn grant(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "grant");
        let label = format!("grant `{}`", name.as_ref().map_or("?", |n| n.0.as_str()));
        let first = self.parsed.references.len();
        let issuer = self.host_ref(&mut n, "issuer", &label);
        let caller = self.host_ref(&mut n, "caller", &label);
        let mailbox = self.named_ref(&mut n, "mailbox", RefKind::Host, false, &label);
        let membership = self.named_ref(&mut n, "membership", RefKind::Membership, false, &label);
        let units = n.int_prop(self, "units", true, 1, u64::MAX as i128);
        let retired = n.bool_prop(self, "retired").unwrap_or(false);
        n.no_children(self);
        n.finish(self);
        // Every party serves Processes and shares a membership with the others: the
        // one the grant names, when it names one.
        let parties: Vec<String> = [&issuer, &caller, &mailbox]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for reference in &mut self.parsed.references[first..] {
            if reference.kind != RefKind::Host {
                continue;
            }
            let others = parties
                .iter()
                .filter(|p| **p != reference.name)
                .cloned()
                .collect();
            reference.require = Some(Requirement::Processes {
                others,
                membership: membership.clone(),
            });
        }
        if let (Some(issuer), Some(caller)) = (&issuer, &caller)
            && issuer == caller
            && let Some(span) = self.parsed.references.get(first + 1).map(|r| r.span)
        {
            self.error(
                span,
                format!("{label}: host `{caller}` cannot be granted units by itself"),
                "the caller is the issuer",
                "a grant lets another host run Processes at the issuer: name a different caller",
            );
        }
        if let (Some((name, span)), Some(issuer), Some(caller), Some((units, _))) =
            (name, issuer, caller, units)
        {
            let origin = self.origin(span);
            self.parsed.topology.grants.push(Grant {
                name,
                issuer,
                caller,
                units: units as u64,
                mailbox,
                membership,
                retired,
                origin,
            });
        }
    }

    pub(super) fn mission(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "mission");
        let label = format!("mission `{}`", name.as_ref().map_or("?", |n| n.0.as_str()));
        let host = self.host_ref(&mut n, "host", &label);
        let units = n.int_prop(self, "units", true, 1, u64::MAX as i128);
        let deadline = n.string_prop(self, "deadline", true).and_then(|(d, span)| {
            if is_rfc3339(&d) {
                Some((d, span))
            } else {
                self.error(
                    span,
                    format!("`{d}` is not an RFC 3339 timestamp"),
                    "not a timestamp",
                    "for example deadline=\"2026-12-01T06:00:00Z\"",
                );
                None
            }
        });
        let successor = n.string_prop(self, "successor", true);
        let issuer = n.string_prop(self, "issuer", false);
        let returned = n.bool_prop(self, "returned").unwrap_or(false);
        n.no_children(self);
        n.finish(self);
        let (
            Some((name, span)),
            Some(host),
            Some((units, _)),
            Some(deadline),
            Some((successor, s_span)),
        ) = (name, host, units, deadline, successor)
        else {
            return;
        };
        if successor == host {
            self.error(
                s_span,
                format!("mission `{name}` names its own host as successor"),
                "same host",
                "the successor is the host that takes over after departure",
            );
        }
        self.parsed.references.push(Reference {
            kind: RefKind::Host,
            name: successor.clone(),
            file: self.file.clone(),
            span: s_span,
            context: format!("mission `{name}` successor"),
            require: None,
        });
        let issuer = match issuer {
            Some((issuer, i_span)) => {
                if issuer == host {
                    self.error(
                        i_span,
                        format!("mission `{name}` names its own host as issuer"),
                        "same host",
                        "the issuer signs the host's allocation: another host (by default the successor)",
                    );
                }
                self.parsed.references.push(Reference {
                    kind: RefKind::Host,
                    name: issuer.clone(),
                    file: self.file.clone(),
                    span: i_span,
                    context: format!("mission `{name}` issuer"),
                    require: None,
                });
                issuer
            }
            None => successor.clone(),
        };
        let origin = self.origin(span);
        let (deadline, deadline_span) = deadline;
        self.parsed
            .mission_deadlines
            .push((self.file.clone(), deadline_span));
        self.parsed.topology.missions.push(Mission {
            name,
            host,
            units: units as u64,
            deadline,
            successor,
            issuer,
            returned,
            origin,
        });
    }

    pub(super) fn export(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "export");
        let label = format!("export `{}`", name.as_ref().map_or("?", |n| n.0.as_str()));
        let gateway = self.host_ref(&mut n, "gateway", &label);
        let mut route = |this: &mut Self, key: &str| {
            let (route, span) = n.string_prop(this, key, true)?;
            this.parsed.references.push(Reference {
                kind: RefKind::Route,
                name: route.clone(),
                file: this.file.clone(),
                span,
                context: format!("{label} `{key}`"),
                require: None,
            });
            Some((route, span))
        };
        let from = route(self, "from");
        let to = route(self, "to");
        let retired = n.bool_prop(self, "retired").unwrap_or(false);
        let mut disclosure: Option<(String, SourceSpan)> = None;
        let mut publication = None;
        let mut expires = None;
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            let span = child.name().span();
            let repeated = |this: &mut Self, what: &str| {
                this.error(
                    span,
                    format!("{label} has a second `{what}`"),
                    "repeated",
                    "an export has one disclosure, one publication and at most one expiry",
                )
            };
            match child.name().value() {
                "disclosure" => {
                    if let Some((issuer, issuer_span)) = c.string_prop(self, "issuer", true) {
                        self.parsed.references.push(Reference {
                            kind: RefKind::Host,
                            name: issuer.clone(),
                            file: self.file.clone(),
                            span: issuer_span,
                            context: format!("{label} disclosure `issuer`"),
                            require: None,
                        });
                        if disclosure.is_some() {
                            repeated(self, "disclosure");
                        } else {
                            disclosure = Some((issuer, issuer_span));
                        }
                    }
                }
                "publication" => {
                    if publication.is_some() {
                        repeated(self, "publication");
                    }
                    publication = Some(span);
                }
                "expires" => {
                    if let Some((at, at_span)) = c.string_arg(self, 0, "time") {
                        if !is_rfc3339(&at) {
                            self.error(
                                at_span,
                                format!("`{at}` is not an RFC 3339 timestamp"),
                                "not a timestamp",
                                "for example expires \"2027-06-30T00:00:00Z\"",
                            );
                        } else if expires.is_some() {
                            repeated(self, "expires");
                        } else {
                            expires = Some(at);
                        }
                    }
                }
                other => {
                    c.skip_all();
                    self.error(
                        span,
                        format!("unknown child `{other}` of export"),
                        "not part of an export",
                        "an export holds `disclosure issuer=H`, `publication` and optionally `expires \"TIME\"`",
                    )
                }
            }
            c.no_children(self);
            c.finish(self);
        }
        n.finish(self);
        let (Some((name, span)), Some(gateway), Some((from, _)), Some((to, to_span))) =
            (name, gateway, from, to)
        else {
            return;
        };
        if from == to {
            self.error(
                to_span,
                format!("export `{name}` reads and writes the same route"),
                "same route",
                "an export passes values from a route of one membership to a route of another",
            );
        }
        if disclosure.is_none() {
            self.error(
                span,
                format!("export `{name}` has no disclosure right"),
                "needs `disclosure issuer=H`",
                "add `disclosure issuer=HOST` naming the publisher of `from`: only the original owner of a value discloses it",
            );
        }
        if publication.is_none() {
            self.error(
                span,
                format!("export `{name}` names no publication right"),
                "needs `publication`",
                "add `publication`: the gateway publishes on `to` only holding the claim `route:TO` at that membership's authority",
            );
        }
        let origin = self.origin(span);
        self.parsed.topology.exports.push(Export {
            name,
            gateway,
            from,
            to,
            issuer: disclosure.map(|(issuer, _)| issuer).unwrap_or_default(),
            expires,
            retired,
            origin,
        });
    }
}
