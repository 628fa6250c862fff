//! The ValidatingAdmissionPolicy that has the API server refuse a Controller whose free-form values nest deeper than [`MAX_VALUES_DEPTH`], so no such object is ever stored.
//!
//! `values` are `x-kubernetes-preserve-unknown-fields`, which a CRD's own CEL rules cannot read
//! and a structural schema cannot bound in depth without growing exponentially. An admission
//! policy reads the whole object, but CEL has no recursion: the rule is one two-variable `all`
//! per level (the same for objects and arrays), [`MAX_VALUES_DEPTH`] of them nested, so the
//! expression grows linearly with the limit and its cost with the number of values. It runs
//! inside the API server (no webhook to keep up), only when the spec changes (so a Controller
//! stored before the policy can still lose its finalizer), and fails closed: a Controller whose
//! values are too many for the API server's CEL cost budget (some 100,000 values in all) is
//! refused too. The decoder's bound in [`super::free_form`] stays the backstop for objects
//! stored without the policy.

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use kube::api::ObjectMeta;

use super::free_form::MAX_VALUES_DEPTH;

/// The name of the policy and of its binding.
pub const POLICY_NAME: &str = "tenancy-hub-values-depth";

/// A CEL expression true when the value `x` nests at most `levels` levels of objects and arrays.
fn nests_within(x: &str, levels: usize) -> String {
    let nested = |v: &str| format!("(type({v}) == map || type({v}) == list)");
    let (mut expression, mut closing, mut current) = (String::new(), String::new(), x.to_owned());
    for level in 0..levels {
        let value = format!("v{level}");
        expression += &format!(
            "(!{} || {current}.all(k{level}, {value}, ",
            nested(&current)
        );
        closing += "))";
        current = value;
    }
    expression + &format!("!{}", nested(&current)) + &closing
}

/// The paths of every free-form values of the Controller `object` that nest too deep, as a list.
fn too_deep_paths() -> String {
    let values = nests_within("c.values", MAX_VALUES_DEPTH);
    let overrides = nests_within("o.values", MAX_VALUES_DEPTH);
    format!(
        "object.spec.tenancies.transformList(i, t, !has(t.charts) ? [] : t.charts.transformList(j, c, \
         (has(c.values) && !{values} ? ['spec.tenancies[%d].charts[%d].values'.format([i, j])] : []) + \
         (!has(c.overrides) ? [] : c.overrides.transformList(n, o, has(o.values) && !{overrides} \
         ? ['spec.tenancies[%d].charts[%d].overrides[%d].values'.format([i, j, n])] : []).flatten())\
         ).flatten()).flatten()"
    )
}

/// What a refused Controller is told: which one, which values, how deep, and what to do.
fn refusal() -> String {
    format!(
        "'Controller ' + object.metadata.namespace + '/' + \
         (has(object.metadata.name) ? object.metadata.name : object.metadata.generateName + '*') + \
         ': ' + variables.tooDeep.join(', ') + ' nest more than {MAX_VALUES_DEPTH} levels of objects \
         and arrays (at least {}; the limit is {MAX_VALUES_DEPTH}): flatten them, or pass the deep \
         part as one string the chart parses'",
        MAX_VALUES_DEPTH + 1
    )
}

/// The policy: Controllers created, or updated with a new spec, whose values nest too deep are refused.
pub fn policy() -> ValidatingAdmissionPolicy {
    ValidatingAdmissionPolicy {
        metadata: ObjectMeta {
            name: Some(POLICY_NAME.into()),
            ..ObjectMeta::default()
        },
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".into()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec!["multitenancy.dev".into()]),
                    api_versions: Some(vec!["*".into()]),
                    operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                    resources: Some(vec!["controllers".into()]),
                    ..NamedRuleWithOperations::default()
                }]),
                ..MatchResources::default()
            }),
            match_conditions: Some(vec![MatchCondition {
                name: "spec-written".into(),
                expression: "request.operation == 'CREATE' || object.spec != oldObject.spec".into(),
            }]),
            variables: Some(vec![Variable {
                name: "tooDeep".into(),
                expression: too_deep_paths(),
            }]),
            validations: Some(vec![Validation {
                expression: "variables.tooDeep.size() == 0".into(),
                message_expression: Some(refusal()),
                message: Some(format!(
                    "values nest more than {MAX_VALUES_DEPTH} levels of objects and arrays: flatten them"
                )),
                reason: Some("Invalid".into()),
            }]),
            ..ValidatingAdmissionPolicySpec::default()
        }),
        status: None,
    }
}

/// The binding that makes the policy deny, for every namespace.
pub fn binding() -> ValidatingAdmissionPolicyBinding {
    ValidatingAdmissionPolicyBinding {
        metadata: ObjectMeta {
            name: Some(POLICY_NAME.into()),
            ..ObjectMeta::default()
        },
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: POLICY_NAME.into(),
            validation_actions: vec!["Deny".into()],
            ..ValidatingAdmissionPolicyBindingSpec::default()
        },
    }
}

/// The policy and its binding as one YAML stream, as `tenancy-hub admission-policy` prints it
/// and `deploy/admission-policy.yaml` holds it.
pub fn policy_yaml() -> String {
    let header = format!(
        "# Generated by `tenancy-hub admission-policy` (kind/crds.sh): the API server refuses a Controller\n\
         # whose values nest more than {MAX_VALUES_DEPTH} levels of objects and arrays.\n"
    );
    let to_yaml = |v: serde_json::Value| serde_yaml::to_string(&v).expect("YAML always serializes");
    let typed = |v: serde_json::Result<serde_json::Value>| v.expect("JSON always serializes");
    let mut policy = typed(serde_json::to_value(policy()));
    let mut binding = typed(serde_json::to_value(binding()));
    policy["apiVersion"] = "admissionregistration.k8s.io/v1".into();
    policy["kind"] = "ValidatingAdmissionPolicy".into();
    binding["apiVersion"] = "admissionregistration.k8s.io/v1".into();
    binding["kind"] = "ValidatingAdmissionPolicyBinding".into();
    format!("{header}{}---\n{}", to_yaml(policy), to_yaml(binding))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_has_one_comprehension_per_level_and_grows_linearly() {
        assert_eq!(nests_within("x", 0), "!(type(x) == map || type(x) == list)");
        assert_eq!(
            nests_within("x", 1),
            "(!(type(x) == map || type(x) == list) || x.all(k0, v0, !(type(v0) == map || type(v0) == list)))"
        );
        let deep = nests_within("c.values", MAX_VALUES_DEPTH);
        assert_eq!(deep.matches(".all(").count(), MAX_VALUES_DEPTH);
        assert!(deep.len() < 100 * MAX_VALUES_DEPTH, "{}", deep.len());
    }

    #[test]
    fn the_policy_checks_values_and_overrides_and_names_the_limit_in_its_refusal() {
        let paths = too_deep_paths();
        assert!(paths.contains("c.values.all(k0, v0,"), "{paths}");
        assert!(paths.contains("o.values.all(k0, v0,"), "{paths}");
        let refusal = refusal();
        for said in [
            "object.metadata.namespace",
            "variables.tooDeep",
            "the limit is 64",
            "at least 65",
        ] {
            assert!(refusal.contains(said), "{said} in {refusal}");
        }
    }

    #[test]
    fn the_policy_fails_closed_judges_spec_writes_only_and_its_binding_denies() {
        let spec = policy().spec.unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        let conditions = spec.match_conditions.unwrap();
        assert!(
            conditions[0]
                .expression
                .contains("object.spec != oldObject.spec")
        );
        let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
        assert_eq!(rules[0].resources, Some(vec!["controllers".to_owned()]));
        let binding = binding().spec;
        assert_eq!(binding.policy_name, POLICY_NAME);
        assert_eq!(binding.validation_actions, vec!["Deny".to_owned()]);
    }

    #[test]
    fn the_deployed_policy_matches_the_code() {
        let deployed = include_str!("../../../deploy/admission-policy.yaml");
        assert!(
            deployed == policy_yaml(),
            "deploy/admission-policy.yaml is stale: run kind/crds.sh"
        );
    }
}
