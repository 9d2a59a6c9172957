use super::*;
use crate::config::Error;
use std::time::Duration;

fn names_at(c: &Config, pt: Points) -> Vec<&'static str> {
    frameworks(c, 1)[0].plugins_at(pt)
}

#[test]
fn plugin_faults_name_the_field() {
    let cases = [
        ("profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: NoSuchPlugin\n", "profiles[0].plugins.filter.enabled[0].name"),
        ("profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: Fancy\n", "profiles[0].pluginConfig[0].args"),
        ("profiles:\n- plugins:\n    score:\n      enabled:\n      - name: ImageLocality\n        weight: -1\n", "profiles[0].plugins.score.enabled[0].weight"),
        // The first fault in file order wins, whichever module finds it.
        ("profiles:\n- schedulerName: a\n  plugins:\n    filter:\n      enabled:\n      - name: Nope\n- schedulerName: a\n", "profiles[0].plugins.filter.enabled[0].name"),
        ("profiles:\n- schedulerName: a\n- schedulerName: a\n  plugins:\n    filter:\n      enabled:\n      - name: Nope\n", "profiles[1].schedulerName"),
        ("profiles:\n- schedulerName: a\n- schedulerName: b\n  plugins:\n    queueSort:\n      enabled:\n      - name: Nope\n", "profiles[1].plugins.queueSort.enabled[0].name"),
    ];
    for (text, field) in cases {
        match Config::parse(text) {
            Err(Error::Invalid { field: f, message }) => assert_eq!(f, field, "{text}: {message}"),
            other => panic!("{text}: expected Invalid at {field}, got {other:?}"),
        }
    }
    let m = Config::parse("profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: NoSuchPlugin\n").err().map(|e| e.to_string()).unwrap_or_default();
    assert_eq!(m, "profiles[0].plugins.filter.enabled[0].name: unknown plugin \"NoSuchPlugin\"");
}

#[test]
fn one_framework_per_profile_in_order() {
    let c = Config::parse("profiles:\n- schedulerName: a\n- schedulerName: b\n  percentageOfNodesToScore: 30\n").expect("valid");
    let p = Profiles::new(&c);
    assert_eq!(p.names(), vec!["a", "b"]);
    assert_eq!(p.names(), c.profile_names());
    let fws = p.frameworks(1);
    assert_eq!(fws.iter().map(|f| f.profile.as_str()).collect::<Vec<_>>(), vec!["a", "b"]);
    assert_eq!(fws[0].plugins_at(Points::FILTER), fws[1].plugins_at(Points::FILTER));
}

#[test]
fn defaults_match_upstream() {
    let c = Config::default_config();
    assert_eq!(c.profile_names(), vec!["default-scheduler"]);
    let fw = &frameworks(&c, 1)[0];
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
    assert_eq!(frameworks(&c, 1)[0].weight("NodeResourcesFit"), Some(1));
}

#[test]
fn score_weight_override_and_disable() {
    let c = Config::parse(
        "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeResourcesFit\n        weight: 5\n      disabled:\n      - name: ImageLocality\n",
    )
    .expect("valid");
    let fw = &frameworks(&c, 1)[0];
    assert_eq!(fw.weight("NodeResourcesFit"), Some(5));
    assert_eq!(fw.weight("ImageLocality"), None);
    assert_eq!(fw.weight("TaintToleration"), Some(3));
}

#[test]
fn every_default_plugin_is_registered() {
    for d in crate::plugins::default_plugins() {
        assert!(crate::plugins::known(d.name), "{} is not registered", d.name);
    }
}

#[test]
fn the_scheduler_refuses_dev_null_naming_the_file() {
    let e = Config::load_for_scheduler("/dev/null").err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.starts_with("/dev/null: (file): the configuration is empty"), "{e}");
}

#[test]
fn gang_scheduling_is_a_default_plugin_with_validated_args() {
    let c = Config::parse("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: berth\n").expect("valid");
    let fw = frameworks(&c, 1).into_iter().next().expect("a profile");
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
