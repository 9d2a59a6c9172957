use super::*;

fn names_at(c: &Config, pt: Points) -> Vec<&'static str> {
    c.frameworks(1)[0].plugins_at(pt)
}

#[test]
fn defaults_match_upstream() {
    let c = Config::default_config();
    assert_eq!(c.profile_names(), vec!["default-scheduler"]);
    let fw = &c.frameworks(1)[0];
    assert_eq!(fw.weight("TaintToleration"), Some(3));
    assert_eq!(fw.weight("NodeAffinity"), Some(2));
    assert_eq!(fw.weight("NodeResourcesFit"), Some(1));
    assert_eq!(names_at(&c, Points::QUEUE_SORT), vec!["PrioritySort"]);
    let filters = names_at(&c, Points::FILTER);
    assert_eq!(&filters[..4], &["NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity"]);
    assert_eq!(c.pod_initial_backoff, Duration::from_secs(1));
    assert_eq!(c.pod_max_backoff, Duration::from_secs(10));
}

#[test]
fn plugin_under_test_only() {
    let c = Config::parse(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n      enabled:\n      - name: NodeResourcesFit\n      - name: PrioritySort\n      - name: DefaultBinder\n      disabled:\n      - name: '*'\n",
    )
    .expect("valid");
    assert_eq!(names_at(&c, Points::FILTER), vec!["NodeResourcesFit"]);
    assert_eq!(names_at(&c, Points::SCORE), vec!["NodeResourcesFit"]);
    assert_eq!(c.frameworks(1)[0].weight("NodeResourcesFit"), Some(1));
}

#[test]
fn score_weight_override_and_disable() {
    let c = Config::parse(
        "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeResourcesFit\n        weight: 5\n      disabled:\n      - name: ImageLocality\n",
    )
    .expect("valid");
    let fw = &c.frameworks(1)[0];
    assert_eq!(fw.weight("NodeResourcesFit"), Some(5));
    assert_eq!(fw.weight("ImageLocality"), None);
    assert_eq!(fw.weight("TaintToleration"), Some(3));
}

#[test]
fn bad_configs_name_the_field() {
    let cases = [
        ("profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: NoSuchPlugin\n", "profiles[0].plugins.filter.enabled[0].name"),
        ("profiles:\n- schedulerName: a\n- schedulerName: a\n", "profiles[1].schedulerName"),
        ("profiles:\n- plugins:\n    score:\n      enabled:\n      - name: ImageLocality\n        weight: -1\n", "profiles[0].plugins.score.enabled[0].weight"),
        ("percentageOfNodesToScore: 101\n", "percentageOfNodesToScore"),
        ("profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: Fancy\n", "profiles[0].pluginConfig[0].args"),
        ("podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 2\n", "podMaxBackoffSeconds"),
    ];
    for (text, field) in cases {
        match Config::parse(text) {
            Err(Error::Invalid { field: f, message }) => assert_eq!(f, field, "{text}: {message}"),
            other => panic!("{text}: expected Invalid at {field}, got {other:?}"),
        }
    }
}

#[test]
fn unknown_field_and_wrong_type_name_the_line() {
    for text in ["profiles:\n- schedulerName: a\n  bogus: 1\n", "percentageOfNodesToScore: lots\n"] {
        match Config::parse(text) {
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
fn every_default_plugin_is_registered() {
    for d in crate::plugins::default_plugins() {
        assert!(crate::plugins::known(d.name), "{} is not registered", d.name);
    }
}

#[test]
fn the_scheduler_refuses_configurations_that_would_take_every_pod() {
    let msg = |t: &str| Config::parse_for_scheduler(t).err().map(|e| e.to_string()).unwrap_or_default();
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
    let ok = Config::parse_for_scheduler(&format!("{head}profiles:\n- schedulerName: berth\n")).expect("valid");
    assert_eq!(ok.profile_names(), vec!["berth"]);
    // Validation still applies.
    assert!(msg(&format!("{head}percentageOfNodesToScore: 101\nprofiles:\n- schedulerName: berth\n")).contains("percentageOfNodesToScore"));
}

#[test]
fn the_scheduler_refuses_dev_null_naming_the_file() {
    let e = Config::load_for_scheduler("/dev/null").err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.starts_with("/dev/null: (file): the configuration is empty"), "{e}");
}

#[test]
fn gang_scheduling_is_a_default_plugin_with_validated_args() {
    let c = Config::parse("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: berth\n").expect("valid");
    let fw = c.frameworks(1).into_iter().next().expect("a profile");
    assert!(fw.plugins_at(crate::framework::Points::PRE_FILTER).contains(&"GangScheduling"));
    let bad = |args: &str| {
        Config::parse(&format!("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: berth\n  pluginConfig:\n  - name: GangScheduling\n    args: {args}\n"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let m = bad("{permitWaitingTimeSeconds: 0}");
    assert!(m.contains("pluginConfig[0].args") && m.contains("permitWaitingTimeSeconds"), "{m}");
    let m = bad("{nope: 1}");
    assert!(m.contains("unknown field"), "{m}");
    assert!(bad("{permitWaitingTimeSeconds: 30}").is_empty());
}
