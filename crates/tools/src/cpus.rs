//! `--cores` checked before anything is opened: every CPU listed must be one this process may
//! run on (`Cpus_allowed_list` in `/proc/self/status`: the CPUs that exist, less those a cpuset
//! or `taskset` keeps it from), so that a run never starts on a CPU it cannot be pinned to.

/// The CPUs this process may run on, ascending; None when that cannot be read (not Linux).
pub fn allowed() -> Option<Vec<usize>> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    parse_list(list)
}

/// A kernel CPU list ("0-3,8,10-11") as its CPUs.
fn parse_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                cpus.extend(a..=b.min(a + 65_536));
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Checks the CPUs of `--cores` (`option` names it in the message): every one must exist and be
/// allowed; the error names all those that are not, and the CPUs there are.
pub fn check(option: &str, cores: &[usize]) -> Result<(), String> {
    let Some(allowed) = allowed() else {
        return Ok(());
    };
    let mut bad: Vec<usize> = cores
        .iter()
        .copied()
        .filter(|c| !allowed.contains(c))
        .collect();
    bad.sort_unstable();
    bad.dedup();
    if bad.is_empty() {
        return Ok(());
    }
    let list = |v: &[usize]| {
        v.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    Err(format!(
        "{option} {}: {} {} not among the CPUs this process may run on ({}, {} in all): list \
         only those",
        list(cores),
        if bad.len() == 1 { "CPU" } else { "CPUs" },
        list(&bad) + if bad.len() == 1 { " is" } else { " are" },
        list(&allowed),
        allowed.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lists_parse() {
        assert_eq!(parse_list("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_list("0"), Some(vec![0]));
        assert_eq!(parse_list("x"), None);
    }

    #[test]
    fn every_missing_cpu_is_named() {
        let n = allowed().map_or(0, |a| a.len());
        if n == 0 {
            return;
        }
        let e = check("--cores", &[0, 100_000, 100_001]).unwrap_err();
        assert!(e.contains("CPUs 100000,100001 are not"), "{e}");
        assert!(check("--cores", &[allowed().unwrap()[0]]).is_ok());
    }
}
