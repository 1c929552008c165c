//! docs/flow-rules.md's flow-rule examples paste and run (issue 20 defect 7: the multicast example had a
//! trailing comment, which the rule parser refuses): every line of the rule block parses.

#[test]
fn readme_rule_examples_parse() {
    let readme = include_str!("../../../../docs/flow-rules.md");
    let start = readme
        .find("A text form for command lines:")
        .expect("docs/flow-rules.md's flow rule section");
    let block = &readme[start..];
    let open = block.find("```text\n").expect("the rule block") + "```text\n".len();
    let len = block[open..].find("```").expect("the block's end");
    let rules: Vec<&str> = block[open..open + len]
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(rules.len() >= 4, "{rules:?}");
    for line in rules {
        if let Err(e) = line.parse::<rawq::flow::Rule>() {
            panic!("docs/flow-rules.md rule {line:?} does not parse: {e}");
        }
    }
}
