//! Limits that need large inputs, generated here rather than committed as files.

use grid_spec::limits::{MODEL_OPERATIONS_CEILING_MAX, ROUTE_DESTINATIONS_MAX};

fn route_with(destinations: usize) -> String {
    let mut text = String::from("grid version=1\nmembership m { authority voters=1; }\n");
    text.push_str(
        "host p listen=\"127.0.0.1:1\" { member m; profiles transport authority delivery; }\n",
    );
    for i in 0..destinations {
        text.push_str(&format!(
            "host d{i} listen=\"127.0.{}.{}:7000\" {{ member m; }}\n",
            i / 250,
            i % 250 + 2
        ));
    }
    text.push_str("route r membership=m class=ordered {\n    publisher p\n");
    for i in 0..destinations {
        text.push_str(&format!("    destination d{i}\n"));
    }
    text.push_str("}\n");
    text
}

#[test]
fn a_route_holds_exactly_route_destinations_max() {
    let text = route_with(ROUTE_DESTINATIONS_MAX);
    let topology = grid_spec::load_str("max.kdl", &text).expect("1,024 destinations are valid");
    assert_eq!(
        topology.routes[0].destinations.len(),
        ROUTE_DESTINATIONS_MAX
    );

    let text = route_with(ROUTE_DESTINATIONS_MAX + 1);
    let diagnostics = grid_spec::load_str("over.kdl", &text).unwrap_err();
    assert_eq!(diagnostics.len(), 1, "{:?}", diagnostics.items);
    let d = &diagnostics.items[0];
    assert!(
        d.message.contains("ROUTE_DESTINATIONS_MAX (1024)"),
        "{}",
        d.message
    );
    // The span points at the 1,025th destination.
    let offset = d.offset().unwrap();
    assert!(
        text[offset..].starts_with(&format!("destination d{ROUTE_DESTINATIONS_MAX}"))
            || text[offset..].starts_with(&format!("d{ROUTE_DESTINATIONS_MAX}")),
        "points at {:?}",
        &text[offset..offset + 20]
    );
}

#[test]
fn ceiling_is_bounded_by_model_operations_ceiling_max() {
    let at = |ceiling: u64| {
        format!(
            "grid version=1\nhost h listen=\"127.0.0.1:1\"\nmodel m host=h ceiling={ceiling} {{ input x; cell y \"x\"; }}\n"
        )
    };
    grid_spec::load_str("ok.kdl", &at(u64::from(MODEL_OPERATIONS_CEILING_MAX)))
        .expect("the maximum is allowed");
    let diagnostics =
        grid_spec::load_str("over.kdl", &at(u64::from(MODEL_OPERATIONS_CEILING_MAX) + 1))
            .unwrap_err();
    assert!(
        diagnostics.items[0]
            .message
            .contains("MODEL_OPERATIONS_CEILING_MAX")
    );
}

#[test]
fn a_publisher_needs_the_delivery_and_authority_profiles_and_an_authority() {
    let with = |membership: &str, profiles: &str| {
        format!(
            "grid version=1\n{membership}\nhost p listen=\"127.0.0.1:1\" {{ member m; {profiles} }}\nhost d listen=\"127.0.0.1:2\" {{ member m; }}\nroute r membership=m class=ordered {{\n    publisher p\n    destination d\n}}\n"
        )
    };
    let authority = "membership m { authority voters=1; }";
    grid_spec::load_str(
        "ok.kdl",
        &with(authority, "profiles transport authority delivery;"),
    )
    .expect("a publisher with both profiles in a membership with an authority is valid");
    for (membership, profiles, expected) in [
        (
            authority,
            "profiles transport authority;",
            "`delivery` profile",
        ),
        (
            authority,
            "profiles transport delivery;",
            "`authority` profile",
        ),
        (
            "membership m",
            "profiles transport authority delivery;",
            "has no authority",
        ),
    ] {
        let text = with(membership, profiles);
        let diagnostics = grid_spec::load_str("bad.kdl", &text).unwrap_err();
        let d = diagnostics
            .items
            .iter()
            .find(|d| d.message.contains("route `r` publisher `p`"))
            .unwrap_or_else(|| panic!("{:?}", diagnostics.items));
        assert!(d.message.contains(expected), "{}", d.message);
        let offset = d.offset().unwrap();
        assert!(text[offset..].starts_with('p'), "points at the publisher");
    }
}

#[test]
fn delivery_capacity_is_bounded() {
    let at = |n: u64| {
        format!(
            "grid version=1\nhost h listen=\"127.0.0.1:1\" {{ capacity ordered-per-destination={n}; }}\n"
        )
    };
    let topology = grid_spec::load_str("ok.kdl", &at(grid_spec::limits::DELIVERY_CAPACITY_MAX))
        .expect("the maximum is allowed");
    assert_eq!(
        topology.hosts[0].capacity.ordered_per_destination,
        Some(grid_spec::limits::DELIVERY_CAPACITY_MAX)
    );
    for bad in [0, grid_spec::limits::DELIVERY_CAPACITY_MAX + 1] {
        let d = grid_spec::load_str("bad.kdl", &at(bad)).unwrap_err();
        assert!(
            d.items[0].message.contains("ordered-per-destination"),
            "{}",
            d.items[0].message
        );
    }
    let d = grid_spec::load_str(
        "bad.kdl",
        "grid version=1\nhost h listen=\"127.0.0.1:1\" { capacity ordered=3; }\n",
    )
    .unwrap_err();
    assert!(
        d.items[0].message.contains("ordered"),
        "{}",
        d.items[0].message
    );
}

#[test]
fn limits_names_lists_every_limit() {
    let source = include_str!("../src/limits.rs");
    let declared: Vec<&str> = source
        .lines()
        .filter_map(|line| line.strip_prefix("pub const "))
        .filter_map(|rest| rest.split(':').next())
        .filter(|name| *name != "NAMES")
        .collect();
    assert_eq!(declared, grid_spec::limits::NAMES);
}

#[test]
fn a_diagnostic_names_the_limit_it_reports() {
    let text = route_with(ROUTE_DESTINATIONS_MAX + 1);
    let error = grid_spec::load_str("over.kdl", &text).unwrap_err();
    let limits: Vec<_> = error.iter().filter_map(|d| d.limit()).collect();
    assert_eq!(limits, ["ROUTE_DESTINATIONS_MAX"]);
    let error = grid_spec::load_str("x.kdl", "grid version=1\nwidget w\n").unwrap_err();
    assert_eq!(error.items[0].limit(), None);
}
