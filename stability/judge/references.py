"""The literature the built-in invariants' explanations cite (`stability explain NAME`), one entry
per key; `refs` gives an explanation's `references` from its keys. A work cited for two different
things has a key for each (GPT-2's residual scaling and its §2.3 init; Goyal et al.'s warm-up and
their zero-γ init). The language-model invariants cite `stability.spec.lm_expect.LM_REFERENCES`.
"""

from __future__ import annotations

__all__ = ["REFERENCES", "refs"]


def refs(*keys: str) -> tuple[str, ...]:
    return tuple(REFERENCES[k] for k in keys)


REFERENCES: dict[str, str] = {
    "resnet": 'He, Zhang, Ren, Sun (2015). "Deep Residual Learning for Image Recognition". CVPR 2016, '
    "arXiv:1512.03385.",
    "identity": 'He, Zhang, Ren, Sun (2016). "Identity Mappings in Deep Residual Networks". ECCV 2016, '
    "arXiv:1603.05027.",
    "highway": 'Srivastava, Greff, Schmidhuber (2015). "Highway Networks". arXiv:1505.00387.',
    "densenet": 'Huang, Liu, van der Maaten, Weinberger (2017). "Densely Connected Convolutional Networks". '
    "CVPR 2017, arXiv:1608.06993.",
    "rezero": 'Bachlechner, Majumder, Mao, Cottrell, McAuley (2020). "ReZero is All You Need: Fast '
    'Convergence at Large Depth". arXiv:2003.04887.',
    "skipinit": 'De, Smith (2020). "Batch Normalization Biases Residual Blocks Towards the Identity Function '
    'in Deep Networks" (SkipInit). NeurIPS 2020, arXiv:2002.10444.',
    "glorot": 'Glorot, Bengio (2010). "Understanding the difficulty of training deep feedforward neural '
    'networks". AISTATS 2010.',
    "pennington": 'Pennington, Schoenholz, Ganguli (2017). "Resurrecting the sigmoid in deep learning '
    'through dynamical isometry: theory and practice". NeurIPS 2017, '
    "arXiv:1711.04735.",
    "poole": 'Poole, Lahiri, Raghu, Sohl-Dickstein, Ganguli (2016). "Exponential expressivity in deep neural '
    'networks through transient chaos". NeurIPS 2016, arXiv:1606.05340.',
    "schoenholz": 'Schoenholz, Gilmer, Ganguli, Sohl-Dickstein (2017). "Deep Information Propagation". ICLR '
    "2017, arXiv:1611.01232.",
    "hanin": 'Hanin (2018). "Which Neural Net Architectures Give Rise to Exploding and Vanishing '
    'Gradients?". NeurIPS 2018, arXiv:1801.03744.',
    "yang": 'Yang, Schoenholz (2017). "Mean Field Residual Networks: On the Edge of Chaos". NeurIPS 2017, '
    "arXiv:1712.08969.",
    "veit": 'Veit, Wilber, Belongie (2016). "Residual Networks Behave Like Ensembles of Relatively Shallow '
    'Networks". NeurIPS 2016, arXiv:1605.06431.',
    "delving": 'He, Zhang, Ren, Sun (2015). "Delving Deep into Rectifiers: Surpassing Human-Level '
    'Performance on ImageNet Classification". ICCV 2015, arXiv:1502.01852.',
    "rank": 'Dong, Cordonnier, Loukas (2021). "Attention is Not All You Need: Pure Attention Loses Rank '
    'Doubly Exponentially with Depth". ICML 2021, arXiv:2103.03404.',
    "signal": (
        'Noci, Anagnostidis, Biggio, Orvieto, Singh, Lucchi (2022). "Signal Propagation in Transformers: '
        'Theoretical Perspectives and the Role of Rank Collapse". NeurIPS 2022, '
        "arXiv:2206.03126."
    ),
    "entropy": (
        'Zhai, Likhomanenko, Littwin, Busbridge, Ramapuram, Zhang, Gu, Susskind (2023). "Stabilizing '
        'Transformer Training by Preventing Attention Entropy Collapse". ICML 2023, '
        "arXiv:2303.06296."
    ),
    "layernorm": 'Xiong, Yang, He, Zheng, Zheng, Xing, Zhang, Lan, Wang, Liu (2020). "On Layer Normalization '
    'in the Transformer Architecture". ICML 2020, arXiv:2002.04745.',
    "deepnet": 'Wang, Ma, Dong, Huang, Zhang, Wei (2022). "DeepNet: Scaling Transformers to 1,000 Layers". '
    "arXiv:2203.00555.",
    "layerscale": 'Touvron, Cord, Sablayrolles, Synnaeve, Jégou (2021). "Going deeper with Image '
    'Transformers" (CaiT, LayerScale). ICCV 2021, arXiv:2103.17239.',
    "mup": 'Yang, Hu, Babuschkin, Sidor, Liu, Farhi, Ryder, Pachocki, Chen, Gao (2021). "Tensor Programs V: '
    "Tuning Large Neural Networks "
    'via Zero-Shot Hyperparameter Transfer" (muP). arXiv:2203.03466.',
    "fixup": 'Zhang, Dauphin, Ma (2019). "Fixup Initialization: Residual Learning Without Normalization". '
    "ICLR 2019, arXiv:1901.09321.",
    "goyal": 'Goyal, Dollar, Girshick, Noordhuis, Wesolowski, Kyrola, Tulloch, Jia, He (2017). "Accurate, '
    'Large Minibatch SGD: Training ImageNet in 1 Hour" (gradual warm-up). '
    "arXiv:1706.02677.",
    "gpt2": 'Radford, Wu, Child, Luan, Amodei, Sutskever (2019). "Language Models are Unsupervised Multitask '
    'Learners" (GPT-2; residual projections scaled by 1/sqrt(N)). OpenAI technical '
    "report.",
    "spp": 'Brock, De, Smith (2021). "Characterizing signal propagation to close the performance gap in '
    'unnormalized ResNets". ICLR 2021, arXiv:2101.08692.',
    "gpt2_init": 'Radford, Wu, Child, Luan, Amodei, Sutskever (2019). "Language Models are Unsupervised '
    'Multitask Learners" (GPT-2), §2.3.',
    "cait": 'Touvron, Cord, Sablayrolles, Synnaeve, Jégou (2021). "Going deeper with Image Transformers" '
    "(CaiT, layer scale). ICCV 2021, arXiv:2103.17239.",
    "goyal_zero_gamma": 'Goyal, Dollár, Girshick, et al. (2017). "Accurate, Large Minibatch SGD: Training '
    'ImageNet in 1 Hour" (zero-γ). arXiv:1706.02677.',
    "gemma": 'Gemma Team (2024). "Gemma: Open Models Based on Gemini Research and Technology". arXiv:2403.08295.',
    "cramer": "Cramér (1946). Mathematical Methods of Statistics, §27.4 (the variance of the sample "
    'variance); Wilson, Hilferty (1931). "The distribution of chi-square". PNAS 17.',
    "david": 'David, Nagaraja (2003). "Order Statistics", 3rd ed., §2.1 (the distribution of the sample '
    "maximum and minimum). Wiley.",
}
