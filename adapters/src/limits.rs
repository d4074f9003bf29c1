//! The adapters' own runtime limits, each a named constant (the language's limits, such
//! as `MODBUS_INTERVAL_MS_MIN`, live in `grid_spec::limits`).
