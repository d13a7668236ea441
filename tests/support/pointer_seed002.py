"""Seed 002's own worked examples, verbatim, for the pointer tests that pin ddai to them."""

SEED_RECORD = {  # §2.1's example raw record: no eval_failed / eval_error fields
    "query_id": "12345",
    "meta": {"image_id": "COCO_000001", "question": "What is the man holding?", "split": "train"},
    # the seed writes [101, 102, 103, ...] with size 32: 101..132 here
    "candidate_pool": {"candidate_ids": list(range(101, 133)), "size": 32},
    "pointer_candidates": [
        {"pointer": [7, 22], "gen_method": "beam", "beam_rank": 0, "beam_score": 2.13,
         "logprob_score": -1.56, "temperature": None, "vqa_pred_answer": "a book",
         "vqa_correct": 1, "vqa_acc_score": 1.0},
        {"pointer": [5, 18], "gen_method": "sample", "beam_rank": None, "beam_score": None,
         "logprob_score": -2.03, "temperature": 1.0, "vqa_pred_answer": "a notebook",
         "vqa_correct": 1, "vqa_acc_score": 0.9},
        {"pointer": [3, 9], "gen_method": "random", "beam_rank": None, "beam_score": None,
         "logprob_score": None, "temperature": None, "vqa_pred_answer": "a phone",
         "vqa_correct": 0, "vqa_acc_score": 0.0},
    ],
}  # fmt: skip
