//! Flow rules: the rule model's properties and parsers, the device model's steering against
//! the reference order, `flow::verbs::compile` against rdma-core's structs (a C oracle),
//! per-rule hit counters on the model, and the rule block of docs/flow-rules.md.

mod model;
mod props;
mod readme_rules;
mod rule_hits_model;
mod verbs_oracle;
