"""compactrl_slime: CompactionRL inside slime (THUDM/slime 624b824a).

Three hooks, each named on slime's command line:

  --custom-generate-function-path compactrl_slime.generate.generate
      plays one compacting episode per Sample on a `compactrl serve`
      process, sampling from slime's SGLang router, and returns one Sample
      per segment sharing an integer rollout_id;
  --custom-convert-samples-to-train-data-path compactrl_slime.convert.convert_samples_to_train_data
      builds slime's train data and carries each sample's N_{>s} (the
      optimised tokens after its segment in its rollout) to the trainer;
  --custom-advantage-function-path compactrl_slime.advantages.cross_gae
      cross-trajectory GAE from slime's critic values (docs/design.md §1.7).

Standard library and torch only. See README.md for the field mapping.
"""
