//! Mappings (issue 34, docs/grdx.md): matrices on mappings of their own. This build
//! checks a mapping and the matrices reading it (geometry, membership, no scalar route
//! on either side) and evaluates matrix reads in models, but does not deliver a
//! mapping's matrices yet: each mapping not retired is a `!` line saying so, never a
//! silent no-op (SPEC §1.1).

use grid_spec::Topology;

use crate::transition::Draft;

/// `! mapping M @ PUBLISHER` for every mapping not retired.
pub fn transitions(topology: &Topology) -> Vec<Draft> {
    topology
        .mappings
        .iter()
        .filter(|m| !m.retired)
        .map(|m| {
            let readers: Vec<String> = topology
                .models
                .iter()
                .filter(|model| !model.retired)
                .flat_map(|model| {
                    model
                        .matrices()
                        .filter(|x| x.mapping == m.name)
                        .map(|x| format!("{}.{}", model.name, x.name))
                })
                .collect();
            let readers = match readers.as_slice() {
                [] => String::new(),
                list => format!("; {} read #N/A until then", list.join(", ")),
            };
            Draft::attention(
                "mapping",
                &m.name,
                &m.publisher,
                format!(
                    "this build checks mappings but does not deliver their matrices yet (issue 34): nothing is published on `{}`{readers}",
                    m.name
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_mapping_not_retired_is_a_line_saying_it_is_not_delivered() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../spec/tests/data/valid/matrices.kdl"
        ))
        .unwrap();
        let topology = grid_spec::load_str("matrices.kdl", &text).unwrap();
        let lines = super::transitions(&topology);
        assert_eq!(lines.len(), 1, "the retired mapping has no line");
        let line = &lines[0].transition;
        assert_eq!(line.op, crate::transition::Op::Attention);
        assert_eq!(
            (line.kind.as_str(), line.name.as_str(), line.host.as_str()),
            ("mapping", "tariffs", "hq")
        );
        assert!(
            line.detail.contains("does not deliver their matrices yet"),
            "{}",
            line.detail
        );
        assert!(
            line.detail.contains("cost.tariff read #N/A until then"),
            "{}",
            line.detail
        );
        assert_eq!(line.action, crate::transition::Action::None);
    }
}
