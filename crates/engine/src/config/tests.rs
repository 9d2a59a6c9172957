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

#[test]
fn a_wrong_type_names_the_field_path_and_a_file_its_name() {
    for (text, field) in [
        ("percentageOfNodesToScore: lots\n", "percentageOfNodesToScore"),
        ("profiles:\n- schedulerName: a\n  percentageOfNodesToScore: many\n", "profiles[0].percentageOfNodesToScore"),
        ("podInitialBackoffSeconds: [1]\n", "podInitialBackoffSeconds"),
    ] {
        match check(text) {
            Err(Error::Parse(m)) => assert!(m.contains(field), "{text}: {m}"),
            other => panic!("{text}: expected a parse error naming {field}, got {other:?}"),
        }
    }
    let path = std::env::temp_dir().join(format!("berth-config-{}.yaml", std::process::id()));
    std::fs::write(&path, "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: lots\n").expect("write");
    let p = path.to_string_lossy().into_owned();
    let m = Config::load(&p).err().map(|e| e.to_string()).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    assert!(m.starts_with(&p) && m.contains("percentageOfNodesToScore") && !m.contains("<input>"), "{m}");
    // A file that cannot be read: named once, its cause left to the source.
    let Err(e) = Config::load("/nonexistent/sched.yaml") else { panic!("a missing file is refused") };
    assert_eq!(e.to_string(), "reading /nonexistent/sched.yaml");
    assert!(std::error::Error::source(&e).is_some());
}
