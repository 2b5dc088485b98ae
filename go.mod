module github.com/kohaku/terraform-provider-kohaku

go 1.26.8
