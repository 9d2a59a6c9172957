use super::*;

/// `Config::parse` without the plugin registry.
fn check(text: &str) -> Result<Config> {
    Config::validate(parse_raw(text)?, |_, _, _| Ok(())).map(|c| c.0)
}

/// `Config::parse_for_scheduler` without the plugin registry.
fn check_for_scheduler(text: &str) -> Result<Config> {
    Config::validate(parse_raw_for_scheduler(text)?, |_, _, _| Ok(())).map(|c| c.0)
}

#[test]
fn bad_configs_name_the_field() {
    let cases = [
        ("profiles:\n- schedulerName: a\n- schedulerName: a\n", "profiles[1].schedulerName"),
        ("percentageOfNodesToScore: 101\n", "percentageOfNodesToScore"),
        ("podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 2\n", "podMaxBackoffSeconds"),
    ];
    for (text, field) in cases {
        match check(text) {
            Err(Error::Invalid { field: f, message }) => assert_eq!(f, field, "{text}: {message}"),
            other => panic!("{text}: expected Invalid at {field}, got {other:?}"),
        }
    }
}

#[test]
fn unknown_field_and_wrong_type_name_the_line() {
    for text in ["profiles:\n- schedulerName: a\n  bogus: 1\n", "percentageOfNodesToScore: lots\n"] {
        match check(text) {
            Err(Error::Parse(m)) => assert!(m.contains("line") || m.contains(':'), "{m}"),
            other => panic!("{text}: expected a parse error, got {other:?}"),
        }
    }
}

#[test]
fn durations() {
    assert_eq!(parse_duration("15s"), Some(Duration::from_secs(15)));
    assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
    assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(parse_duration("abc"), None);
}

#[test]
fn the_scheduler_refuses_configurations_that_would_take_every_pod() {
    let msg = |t: &str| check_for_scheduler(t).err().map(|e| e.to_string()).unwrap_or_default();
    for empty in ["", "\n", "# nothing\n", "---\n"] {
        let m = msg(empty);
        assert!(m.contains("the configuration is empty") && m.contains("profiles"), "{empty:?}: {m}");
    }
    let m = msg("profiles:\n- schedulerName: berth\n");
    assert!(m.starts_with("apiVersion: missing") && m.contains(API_VERSION), "{m}");
    let m = msg("apiVersion: kubescheduler.config.k8s.io/v1\nprofiles:\n- schedulerName: berth\n");
    assert!(m.starts_with("kind: missing"), "{m}");
    let head = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";
    for none in [String::new(), "profiles: []\n".to_string()] {
        let m = msg(&format!("{head}{none}"));
        assert!(m.starts_with("profiles: empty") && m.contains("race the cluster's own scheduler"), "{m}");
    }
    let ok = check_for_scheduler(&format!("{head}profiles:\n- schedulerName: berth\n")).expect("valid");
    assert_eq!(ok.profile_names(), vec!["berth"]);
    // Validation still applies.
    assert!(msg(&format!("{head}percentageOfNodesToScore: 101\nprofiles:\n- schedulerName: berth\n")).contains("percentageOfNodesToScore"));
}
