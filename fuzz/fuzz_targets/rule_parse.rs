//! Fuzzes the text form of flow rules: parsing arbitrary bytes must never panic, and whatever
//! parses must print as text that parses back to the same rule. Rules that parse are also
//! validated and compiled to verbs flow specs, which must not panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rawq::flow::{verbs, Rule};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(rule) = text.parse::<Rule>() {
        let printed = rule.to_string();
        match printed.parse::<Rule>() {
            Ok(back) => assert_eq!(back, rule, "{text:?} printed as {printed:?}"),
            Err(e) => panic!("{text:?} printed as {printed:?}, which does not parse: {e}"),
        }
        let _ = rule.validate(4);
        let _ = verbs::compile(&rule, 1);
    }
});
