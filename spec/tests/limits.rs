//! Limits that need large inputs, generated here rather than committed as files.

use grid_spec::limits::{MODEL_OPERATIONS_CEILING_MAX, ROUTE_DESTINATIONS_MAX};

fn route_with(destinations: usize) -> String {
    let mut text = String::from("grid version=1\nmembership m\n");
    text.push_str("host p listen=\"127.0.0.1:1\" { member m; }\n");
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
