//! Tests of [`super`]: each rule once with a passing and a failing value, then generated hostile
//! bodies that must all come back as 400s naming a field, never as a panic.

use serde_json::{json, Value};

use super::*;
use oracle::decode::guide::OutputFormat;

const LIMITS: Limits =
    Limits { max_model_len: 512, vocab_size: 1000, max_n: 4, default_max_tokens: 16, max_prompt_chars: 512 * 32 };

fn completion(extra: Value) -> Result<CompletionRequest, ApiError> {
    let mut body = json!({"model": "tiny", "prompt": "hello"});
    merge(&mut body, extra);
    parse_completion(body.to_string().as_bytes(), &LIMITS)
}

fn chat(extra: Value) -> Result<ChatRequest, ApiError> {
    let mut body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]});
    merge(&mut body, extra);
    parse_chat(body.to_string().as_bytes(), &LIMITS)
}

fn merge(body: &mut Value, extra: Value) {
    for (k, v) in extra.as_object().expect("extra fields are an object") {
        body[k] = v.clone();
    }
}

/// Asserts a 400 on `param` whose message contains each of `needles`.
fn assert_invalid<T: std::fmt::Debug>(got: Result<T, ApiError>, param: &str, needles: &[&str]) {
    let e = got.expect_err("should be refused");
    assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{e}");
    for needle in needles {
        assert!(e.message.contains(needle), "{:?} lacks {needle:?}", e.message);
    }
}

#[test]
fn defaults_follow_openai() {
    let s = completion(json!({})).unwrap().sampling;
    let expected = Sampling {
        max_tokens: None,
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        min_p: 0.0,
        seed: None,
        stop: vec![],
        stop_token_ids: vec![],
        include_stop_str_in_output: false,
        n: 1,
        best_of: 1,
        ignore_eos: false,
        logprobs: None,
        prompt_logprobs: None,
        echo: false,
        processors: LogitsProcessors::none(),
        truncate_prompt_tokens: None,
        stream: false,
        include_usage: false,
        continuous_usage_stats: false,
    };
    assert_eq!(s, expected);
}

#[test]
fn every_field_is_read() {
    let req = completion(json!({
        "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 40, "seed": u64::MAX,
        "stop": ["a", "bc"], "n": 3, "ignore_eos": true, "logprobs": 2, "stream": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true}, "unknown_field": {"ignored": 1},
    }))
    .unwrap();
    assert_eq!(req.model, "tiny");
    assert_eq!(req.prompt, Prompt::Text("hello".into()));
    let s = req.sampling;
    assert_eq!((s.max_tokens, s.temperature, s.top_p, s.top_k), (Some(7), 0.0, 0.5, 40));
    assert_eq!((s.seed, s.n, s.ignore_eos, s.logprobs), (Some(u64::MAX), 3, true, Some(2)));
    assert_eq!(s.stop, ["a", "bc"]);
    assert!(s.stream && s.include_usage && s.continuous_usage_stats);
}

#[test]
fn max_completion_tokens_is_obeyed_over_max_tokens() {
    assert_eq!(chat(json!({"max_completion_tokens": 9})).unwrap().sampling.max_tokens, Some(9));
    assert_eq!(chat(json!({"max_tokens": 3, "max_completion_tokens": 9})).unwrap().sampling.max_tokens, Some(9));
    assert_invalid(
        chat(json!({"max_completion_tokens": 0})),
        "max_completion_tokens",
        &["max_completion_tokens", ">= 1", "0"],
    );
}

#[test]
fn top_k_minus_one_means_all() {
    assert_eq!(completion(json!({"top_k": -1})).unwrap().sampling.top_k, 0);
    assert_invalid(completion(json!({"top_k": -2})), "top_k", &["top_k", "-1", "Given: -2"]);
}

#[test]
fn stop_takes_a_string_or_up_to_four() {
    assert_eq!(completion(json!({"stop": "\n"})).unwrap().sampling.stop, ["\n"]);
    assert_eq!(completion(json!({"stop": null})).unwrap().sampling.stop, Vec::<String>::new());
    assert_invalid(completion(json!({"stop": ["a", "b", "c", "d", "e"]})), "stop", &["at most 4", "Given: 5"]);
    assert_invalid(completion(json!({"stop": ""})), "stop", &["empty"]);
    assert_invalid(completion(json!({"stop": ["a", 3]})), "stop", &["stop[1]", "string", "3"]);
}

#[test]
fn ranges_name_field_limit_and_value() {
    let cases = [
        (json!({"max_tokens": 0}), "max_tokens", vec![">= 1", "Given: 0"]),
        (json!({"max_tokens": -5}), "max_tokens", vec![">= 1", "Given: -5"]),
        (json!({"max_tokens": 513}), "max_tokens", vec!["<= 512", "Given: 513"]),
        (json!({"max_tokens": u64::MAX}), "max_tokens", vec!["<= 512", "18446744073709551615"]),
        (json!({"temperature": 2.5}), "temperature", vec!["[0, 2]", "2.5"]),
        (json!({"temperature": -0.1}), "temperature", vec!["[0, 2]", "-0.1"]),
        (json!({"top_p": 0}), "top_p", vec!["(0, 1]", "Given: 0"]),
        (json!({"top_p": 1.01}), "top_p", vec!["(0, 1]", "1.01"]),
        (json!({"n": 0}), "n", vec![">= 1", "0"]),
        (json!({"n": 5}), "n", vec!["<= 4", "5"]),
        (json!({"seed": -1}), "seed", vec!["seed", "-1"]),
        (json!({"seed": 1.5}), "seed", vec!["seed", "1.5"]),
        (json!({"logprobs": 21}), "logprobs", vec!["<= 20", "21"]),
        (json!({"logprobs": -1}), "logprobs", vec![">= 0", "-1"]),
    ];
    for (extra, param, needles) in cases {
        assert_invalid(completion(extra), param, &needles);
    }
}

#[test]
fn wrong_types_name_the_type_given() {
    let cases = [
        (json!({"model": 3}), "model", vec!["`model` must be a string", "number 3"]),
        (json!({"max_tokens": "10"}), "max_tokens", vec!["integer", "string \"10\""]),
        (json!({"max_tokens": 1.5}), "max_tokens", vec!["integer", "1.5"]),
        (json!({"temperature": "hot"}), "temperature", vec!["number", "\"hot\""]),
        (json!({"stream": "yes"}), "stream", vec!["boolean", "\"yes\""]),
        (json!({"ignore_eos": 1}), "ignore_eos", vec!["boolean"]),
        (json!({"stream_options": true}), "stream_options", vec!["object"]),
        (json!({"stream_options": {"include_usage": "y"}}), "stream_options", vec!["include_usage", "boolean"]),
        (
            json!({"stream_options": {"continuous_usage_stats": 1}}),
            "stream_options",
            vec!["continuous_usage_stats", "boolean"],
        ),
        (json!({"prompt": {"text": "x"}}), "prompt", vec!["prompt", "object"]),
    ];
    for (extra, param, needles) in cases {
        assert_invalid(completion(extra), param, &needles);
    }
}

#[test]
fn bad_json_and_non_objects_blame_the_body() {
    for body in [&b"{"[..], b"", b"nul", b"\xff\xfe", b"{\"model\": \"tiny\",}"] {
        assert_invalid(parse_completion(body, &LIMITS), "body", &["not valid JSON"]);
    }
    assert_invalid(parse_chat(b"[1, 2]", &LIMITS), "body", &["JSON object", "array [1,2]"]);
    assert_invalid(parse_completion(br#"{"prompt": "x"}"#, &LIMITS), "model", &["required"]);
}

#[test]
fn prompts_take_all_four_forms() {
    let form = |p: Value| completion(json!({ "prompt": p })).map(|r| r.prompt);
    assert_eq!(form(json!(["a", "b"])).unwrap(), Prompt::Texts(vec!["a".into(), "b".into()]));
    assert_eq!(form(json!([1, 999])).unwrap(), Prompt::Ids(vec![1, 999]));
    assert_eq!(form(json!([[1], [2, 3]])).unwrap(), Prompt::IdLists(vec![vec![1], vec![2, 3]]));
}

#[test]
fn prompts_refuse_empty_mixed_and_out_of_vocabulary() {
    let form = |p: Value| completion(json!({ "prompt": p }));
    assert_invalid(form(json!("")), "prompt", &["empty"]);
    assert_invalid(form(json!([])), "prompt", &["empty"]);
    assert_invalid(form(json!(["a", ""])), "prompt", &["prompt[1]", "empty"]);
    assert_invalid(form(json!([[1], []])), "prompt", &["prompt[1]", "empty"]);
    assert_invalid(form(json!(["a", 1])), "prompt", &["prompt[1]", "string"]);
    assert_invalid(form(json!([1, "a"])), "prompt", &["prompt[1]", "token id", "\"a\""]);
    assert_invalid(form(json!([1, 1000])), "prompt", &["prompt[1]", "[0, 1000)", "Given: 1000"]);
    assert_invalid(form(json!([[1], [2, -3]])), "prompt", &["prompt[1][1]", "-3"]);
    assert_invalid(form(json!([1.5])), "prompt", &["prompt[0]", "1.5"]);
    assert_invalid(form(json!([null])), "prompt", &["prompt[0]"]);
    assert_invalid(form(json!(null)), "prompt", &["required"]);
}

#[test]
fn chat_messages_are_checked() {
    let with = |m: Value| chat(json!({ "messages": m }));
    let ok = with(json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": null, "tool_calls": []},
        {"role": "tool", "content": "42", "tool_call_id": "x"},
    ]))
    .unwrap();
    let got: Vec<(&str, &str)> = ok.messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
    assert_eq!(got, [("system", "be brief"), ("user", "a\nb"), ("assistant", ""), ("tool", "42")]);

    assert_invalid(with(json!([])), "messages", &["at least one", "[]"]);
    assert_invalid(with(json!("hi")), "messages", &["list", "\"hi\""]);
    assert_invalid(
        with(json!([{"role": "wizard", "content": "x"}])),
        "messages",
        &["messages[0].role", "user", "\"wizard\""],
    );
    assert_invalid(with(json!([{"content": "x"}])), "messages", &["messages[0].role", "required"]);
    assert_invalid(with(json!([{"role": "user"}])), "messages", &["messages[0].content", "required"]);
    assert_invalid(with(json!([{"role": "user", "content": 5}])), "messages", &["messages[0].content", "5"]);
    assert_invalid(with(json!([7])), "messages", &["messages[0]", "object"]);
    let image = json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]);
    assert_invalid(with(image), "messages", &["messages[0].content[0]", "text"]);
}

#[test]
fn chat_logprobs_are_a_flag_and_a_count() {
    assert_eq!(chat(json!({"logprobs": true})).unwrap().sampling.logprobs, Some(0));
    assert_eq!(chat(json!({"logprobs": true, "top_logprobs": 5})).unwrap().sampling.logprobs, Some(5));
    assert_eq!(chat(json!({"logprobs": false})).unwrap().sampling.logprobs, None);
    assert_invalid(chat(json!({"top_logprobs": 5})), "top_logprobs", &["logprobs"]);
    assert_invalid(chat(json!({"logprobs": true, "top_logprobs": 21})), "top_logprobs", &["<= 20", "21"]);
    assert_invalid(chat(json!({"logprobs": 3})), "logprobs", &["boolean"]);
}

#[test]
fn prompt_logprobs_are_a_count_on_both_routes_and_never_streamed() {
    let on_completion = |v: Value| completion(v).map(|r| r.sampling);
    let on_chat = |v: Value| chat(v).map(|r| r.sampling);
    let routes: [&dyn Fn(Value) -> Result<Sampling, ApiError>; 2] = [&on_completion, &on_chat];
    for parse in routes {
        assert_eq!(parse(json!({"prompt_logprobs": 3})).unwrap().prompt_logprobs, Some(3));
        assert_eq!(parse(json!({"prompt_logprobs": 0})).unwrap().prompt_logprobs, Some(0));
        assert_eq!(parse(json!({"prompt_logprobs": null})).unwrap().prompt_logprobs, None);
        assert_invalid(parse(json!({"prompt_logprobs": -1})), "prompt_logprobs", &[">= 0", "-1"]);
        assert_invalid(parse(json!({"prompt_logprobs": 21})), "prompt_logprobs", &["<= 20", "21"]);
        assert_invalid(parse(json!({"prompt_logprobs": true})), "prompt_logprobs", &["integer"]);
        assert_invalid(parse(json!({"prompt_logprobs": 1, "stream": true})), "prompt_logprobs", &["stream"]);
    }
}

#[test]
fn long_values_are_cut_in_messages() {
    let e = completion(json!({"temperature": "x".repeat(10_000)})).unwrap_err();
    assert!(e.message.len() < 300, "{} bytes", e.message.len());
    assert!(e.message.ends_with("..."), "{}", e.message);
}

/// A small deterministic generator, so a failure names a reproducible case.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % below as u64) as usize
    }
}

fn hostile_value(rng: &mut Lcg) -> Value {
    match rng.next(12) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(-1),
        3 => json!(0),
        4 => json!(1e30),
        5 => json!(u64::MAX),
        6 => json!(""),
        7 => json!("x".repeat(rng.next(300))),
        8 => json!([]),
        9 => json!([[], [1, -1], "a"]),
        10 => json!({"include_usage": 3}),
        _ => json!(i64::MIN),
    }
}

const FIELDS: [&str; 34] = [
    "logit_bias",
    "min_tokens",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "min_p",
    "stop_token_ids",
    "include_stop_str_in_output",
    "best_of",
    "tools",
    "tool_choice",
    "response_format",
    "suffix",
    "guided_json",
    "allowed_token_ids",
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "n",
    "ignore_eos",
    "logprobs",
    "top_logprobs",
    "stream",
    "stream_options",
    "echo",
    "user",
    "",
];

#[test]
fn generated_hostile_bodies_are_refused_by_field_never_by_panic() {
    let mut rng = Lcg(10);
    let mut refused = 0;
    for case in 0..2_000 {
        let mut body = json!({
            "model": "tiny", "prompt": [1, 2], "messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
        });
        for _ in 0..1 + rng.next(3) {
            body[FIELDS[rng.next(FIELDS.len())]] = hostile_value(&mut rng);
        }
        let mut bytes = body.to_string().into_bytes();
        if rng.next(4) == 0 {
            let cut = rng.next(bytes.len());
            bytes.truncate(cut);
        }
        for result in [parse_completion(&bytes, &LIMITS).err(), parse_chat(&bytes, &LIMITS).err()] {
            let Some(e) = result else { continue };
            refused += 1;
            assert_eq!(e.status, 400, "case {case}: {e}");
            let param = e.param.as_deref().unwrap_or_else(|| panic!("case {case}: no param in {e}"));
            assert!(param == "body" || e.message.contains(param), "case {case}: {param} not in {}", e.message);
        }
    }
    assert!(refused > 1_000, "only {refused} of 4000 parses were refused");
}

#[test]
fn long_prompts_many_messages_and_long_stops_are_refused_before_tokenising() {
    let long = "x".repeat(512 * 32 + 1);
    let e = parse_completion(json!({"model": "m", "prompt": long}).to_string().as_bytes(), &LIMITS).unwrap_err();
    assert_eq!((e.status, e.param.as_deref()), (400, Some("prompt")), "{e}");
    assert!(e.message.contains("16384") && e.message.contains("16385"), "{e}");
    let e =
        parse_completion(json!({"model": "m", "prompt": ["ok", long]}).to_string().as_bytes(), &LIMITS).unwrap_err();
    assert!(e.message.contains("`prompt[1]`"), "{e}");

    let half = "y".repeat(512 * 16 + 1);
    let two = json!([{"role": "user", "content": half}, {"role": "user", "content": half}]);
    let e = parse_chat(json!({"model": "m", "messages": two}).to_string().as_bytes(), &LIMITS).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("messages"), "{e}");
    let many: Vec<Value> = (0..MAX_MESSAGES + 1).map(|_| json!({"role": "user", "content": "a"})).collect();
    let e = parse_chat(json!({"model": "m", "messages": many}).to_string().as_bytes(), &LIMITS).unwrap_err();
    assert!(e.message.contains(&format!("at most {MAX_MESSAGES}")), "{e}");

    let stop = "z".repeat(MAX_STOP_BYTES + 1);
    let e = parse_completion(json!({"model": "m", "prompt": "a", "stop": [stop]}).to_string().as_bytes(), &LIMITS)
        .unwrap_err();
    assert_eq!(e.param.as_deref(), Some("stop"), "{e}");
    assert!(e.message.contains(&MAX_STOP_BYTES.to_string()), "{e}");
}

#[test]
fn sampling_parameters_are_read_into_the_engines_terms() {
    let s = completion(json!({
        "logit_bias": {"5": -100, "17": 2.5}, "min_tokens": 3, "max_tokens": 8, "repetition_penalty": 1.2,
        "frequency_penalty": -0.5, "presence_penalty": 2, "min_p": 0.05, "stop_token_ids": [7, 9],
        "include_stop_str_in_output": true, "echo": true, "n": 2, "best_of": 3,
    }))
    .unwrap()
    .sampling;
    let p = &s.processors;
    let mut bias = p.logit_bias.clone();
    bias.sort_by_key(|b| b.0);
    assert_eq!(bias, vec![(5, -100.0), (17, 2.5)]);
    assert_eq!((p.min_tokens, p.repetition_penalty, p.frequency_penalty, p.presence_penalty), (3, 1.2, -0.5, 2.0));
    assert_eq!((s.min_p, s.stop_token_ids.clone(), s.include_stop_str_in_output), (0.05, vec![7, 9], true));
    assert_eq!((s.echo, s.n, s.best_of), (true, 2, 3));
    assert_eq!(completion(json!({"echo": true, "max_tokens": 0})).unwrap().sampling.max_tokens, Some(0));
    let c = chat(json!({"min_p": 1, "stop_token_ids": [], "logit_bias": {}})).unwrap().sampling;
    assert_eq!((c.min_p, c.processors.clone(), c.best_of), (1.0, LogitsProcessors::none(), 1));
}

#[test]
fn sampling_parameters_out_of_range_are_refused_by_name() {
    let cases = [
        (json!({"logit_bias": {"1000": 1}}), "logit_bias", vec!["[0, 1000)", "1000"]),
        (json!({"logit_bias": {"x": 1}}), "logit_bias", vec!["token ids", "x"]),
        (json!({"logit_bias": {"3": 101}}), "logit_bias", vec!["[-100, 100]", "101"]),
        (json!({"logit_bias": [1, 2]}), "logit_bias", vec!["object"]),
        (json!({"min_tokens": -1}), "min_tokens", vec![">= 0"]),
        (json!({"min_tokens": 9, "max_tokens": 8}), "min_tokens", vec!["<= max_tokens = 8", "9"]),
        (json!({"repetition_penalty": 0}), "repetition_penalty", vec!["in (0, inf). Given: 0"]),
        (json!({"repetition_penalty": 1e300}), "repetition_penalty", vec!["finite"]),
        (json!({"frequency_penalty": 2.5}), "frequency_penalty", vec!["[-2, 2]", "2.5"]),
        (json!({"presence_penalty": -3}), "presence_penalty", vec!["[-2, 2]", "-3"]),
        (json!({"min_p": 1.5}), "min_p", vec!["[0, 1]", "1.5"]),
        (json!({"stop_token_ids": [1, 1000]}), "stop_token_ids", vec!["[0, 1000)", "1000"]),
        (json!({"stop_token_ids": 5}), "stop_token_ids", vec!["list"]),
        (json!({"include_stop_str_in_output": 1}), "include_stop_str_in_output", vec!["boolean"]),
        (json!({"best_of": 1, "n": 2}), "best_of", vec![">= n = 2", "1"]),
        (json!({"best_of": 3, "stream": true}), "best_of", vec!["stream"]),
        (json!({"best_of": 5}), "best_of", vec!["<= 4"]),
        (json!({"echo": "yes"}), "echo", vec!["boolean"]),
        (json!({"max_tokens": 0, "echo": false}), "max_tokens", vec![">= 1"]),
        (json!({"max_tokens": -1, "echo": true}), "max_tokens", vec![">= 0"]),
    ];
    for (extra, param, needles) in cases {
        assert_invalid(completion(extra.clone()), param, &needles);
    }
}

#[test]
fn output_formats_are_json_object_or_a_choice_list() {
    let on_completion = |v: Value| completion(v).map(|r| r.sampling.processors.guide);
    let on_chat = |v: Value| chat(v).map(|r| r.sampling.processors.guide);
    let routes: [&dyn Fn(Value) -> Result<Option<OutputFormat>, ApiError>; 2] = [&on_completion, &on_chat];
    for parse in routes {
        assert_eq!(parse(json!({"response_format": {"type": "json_object"}})).unwrap(), Some(OutputFormat::JsonObject));
        assert_eq!(parse(json!({"response_format": {"type": "text"}})).unwrap(), None);
        let yes_no = parse(json!({"guided_choice": ["yes", "no"]})).unwrap();
        assert_eq!(yes_no, Some(OutputFormat::Choice(vec!["yes".into(), "no".into()])));
        assert_eq!(parse(json!({"guided_choice": null, "response_format": null})).unwrap(), None);
        assert_invalid(parse(json!({"response_format": "json"})), "response_format", &["object"]);
        assert_invalid(parse(json!({"response_format": {"type": "xml"}})), "response_format", &["json_object", "xml"]);
        assert_invalid(parse(json!({"guided_choice": "yes"})), "guided_choice", &["list of strings"]);
        assert_invalid(parse(json!({"guided_choice": ["a", 1]})), "guided_choice", &["guided_choice[1]", "string"]);
        assert_invalid(parse(json!({"guided_choice": []})), "guided_choice", &["1 to 256", "got 0"]);
        assert_invalid(parse(json!({"guided_choice": ["a", "a"]})), "guided_choice", &["twice"]);
        assert_invalid(parse(json!({"guided_choice": ["a"], "min_tokens": 1})), "guided_choice", &["min_tokens"]);
        let both = json!({"guided_choice": ["a"], "response_format": {"type": "json_object"}});
        assert_invalid(parse(both), "guided_choice", &["not both"]);
        // vLLM's newer structured_outputs: choice or json_object, refusals named by that field.
        let so = |v: Value| parse(json!({ "structured_outputs": v }));
        assert_eq!(
            so(json!({"choice": ["x", "y"]})).unwrap(),
            Some(OutputFormat::Choice(vec!["x".into(), "y".into()]))
        );
        assert_eq!(so(json!({"json_object": true, "json": null})).unwrap(), Some(OutputFormat::JsonObject));
        assert_eq!(so(json!({"json_object": false})).unwrap(), None);
        assert_invalid(so(json!({"json": {"type": "object"}})), "structured_outputs", &["structured_outputs.json"]);
        assert_eq!(so(json!({"regex": "a+"})).unwrap(), Some(OutputFormat::Regex("a+".into())));
        assert_invalid(so(json!({"regex": "(a"})), "structured_outputs", &["cannot be compiled"]);
        assert_invalid(so(json!({"regex": 1})), "structured_outputs", &["structured_outputs.regex", "string"]);
        assert_eq!(parse(json!({"guided_regex": "[0-9]+"})).unwrap(), Some(OutputFormat::Regex("[0-9]+".into())));
        assert_invalid(parse(json!({"guided_regex": "(a"})), "guided_regex", &["cannot be compiled"]);
        assert_invalid(parse(json!({"guided_regex": ["a"]})), "guided_regex", &["string"]);
        assert_invalid(so(json!({"choice": ["a"], "json_object": true})), "structured_outputs", &["one format"]);
        assert_invalid(so(json!({"choice": ["a", "a"]})), "structured_outputs", &["twice"]);
        assert_invalid(so(json!({"choice": "a"})), "structured_outputs", &["structured_outputs.choice", "list"]);
        assert_invalid(so(json!({"json_object": 1})), "structured_outputs", &["boolean"]);
        assert_invalid(so(json!([1])), "structured_outputs", &["object"]);
        let two = json!({"guided_choice": ["a"], "structured_outputs": {"json_object": true}});
        assert_invalid(parse(two), "structured_outputs", &["not both"]);
    }
}

#[test]
fn what_cannot_be_honoured_is_refused_naming_it_and_its_no_op_values_pass() {
    for (field, value) in [
        ("tools", json!([{"type": "function", "function": {"name": "f"}}])),
        ("tool_choice", json!("auto")),
        ("functions", json!([{"name": "f"}])),
        ("function_call", json!("auto")),
        ("response_format", json!({"type": "json_schema", "json_schema": {}})),
        ("suffix", json!("tail")),
        ("use_beam_search", json!(true)),
        ("guided_json", json!({})),
        ("allowed_token_ids", json!([1])),
        ("skip_special_tokens", json!(false)),
        ("add_generation_prompt", json!(false)),
        ("chat_template", json!("{{ messages }}")),
    ] {
        assert_invalid(completion(json!({field: value.clone()})), field, &[field]);
        assert_invalid(chat(json!({field: value})), field, &[field]);
    }
    assert_invalid(chat(json!({"echo": true})), "echo", &["/v1/completions"]);
    for (field, value) in [
        ("tools", json!([])),
        ("tool_choice", json!("none")),
        ("response_format", json!({"type": "text"})),
        ("suffix", json!("")),
        ("use_beam_search", json!(false)),
        ("guided_json", json!(null)),
        ("skip_special_tokens", json!(true)),
        ("add_generation_prompt", json!(true)),
        ("continue_final_message", json!(false)),
    ] {
        completion(json!({field: value.clone()})).unwrap();
        chat(json!({field: value})).unwrap();
    }
    chat(json!({"echo": false})).unwrap();
}

#[test]
fn developer_messages_are_system_messages() {
    let req =
        chat(json!({"messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}]}));
    assert_eq!(req.unwrap().messages[0], ChatMessage { role: "system".into(), content: "be brief".into() });
}

#[test]
fn truncate_prompt_tokens_is_a_length_up_to_the_models_or_minus_one_for_it() {
    let keep = |v: Value| completion(json!({"truncate_prompt_tokens": v})).map(|r| r.sampling.truncate_prompt_tokens);
    assert_eq!(keep(json!(1)).unwrap(), Some(1));
    assert_eq!(keep(json!(512)).unwrap(), Some(512));
    assert_eq!(keep(json!(-1)).unwrap(), Some(512), "the model's length");
    assert_eq!(keep(json!(null)).unwrap(), None);
    for bad in [json!(0), json!(-2), json!(513)] {
        assert_invalid(keep(bad.clone()), "truncate_prompt_tokens", &["[1, 512]", &bad.to_string()]);
    }
    assert_invalid(keep(json!("8")), "truncate_prompt_tokens", &["integer"]);
    let chat = chat(json!({"truncate_prompt_tokens": 3})).unwrap();
    assert_eq!(chat.sampling.truncate_prompt_tokens, Some(3));
}
